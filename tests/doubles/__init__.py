"""Test doubles, in one place: stand-ins for our own contracts (daemon/contracts.py) and for the
libraries we talk to, for narrow unit tests of our own logic. End-to-end tests (tests/e2e/) use the
real vLLM engine, the real broker and real folders instead.

What lives where:

* :mod:`tests.doubles.engine`: :class:`FakeEngine`, an ``EngineClient`` that records each request
  (:class:`Call`) and answers a fixed text; :class:`FakeAsyncLLM`, vLLM's ``AsyncLLM`` as
  ``Engine.stop`` touches it.
* :mod:`tests.doubles.admission`: :class:`Request`, a client holding an admission slot until released;
  :class:`RecordingAdmission`, the real admission remembering each slot asked for.
* :mod:`tests.doubles.clock`: :class:`FakeClock`, the one fake clock (a ``clock=`` callable, or in place
  of the ``time`` module).
* :mod:`tests.doubles.kafka`: the committer's :class:`FakeConsumer`, :class:`FakeSink` and
  :class:`RefusingSink`; the sink's :class:`FakeProducer`, :class:`ScriptedSink` and
  :class:`RecordingProducer`; :func:`kafka_config`, a config whose broker is never reached.
* :mod:`tests.doubles.sources`: :class:`IdleSource`, a source with nothing to give; :class:`Collector`,
  the consumer side of a real source.
* :mod:`tests.doubles.work`: :class:`Acks`, a source's side of work items (what they load, the
  acknowledgements they get).
* :mod:`tests.doubles.tokenizers`: tokenizers without a chat template, or with a broken one.
* :mod:`tests.doubles.logs`: :func:`captured_logs`, the structlog events logged (the unit tests'
  ``logs`` fixture); records of the standard library's ``logging`` (vLLM's) are pytest's ``caplog``.

Small stand-ins that belong to one test (a closure replacing one function, a two-line class) stay in
that test.
"""
