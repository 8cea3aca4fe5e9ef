"""The remote engine (``engine.mode = "remote"``): docsumd's requests go to OpenAI-compatible servers
(vLLM's, or a router in front of several) instead of an engine in its own process.

What stays the same: documents are read, checked, cut and turned into prompts by docsumd, with the
served model's own tokenizer loaded locally; every request goes through admission (short documents
first, a short prefill queue, waves), which now bounds the whole fleet. What changes is where a
request runs, in data-flow order:

* :mod:`.checks`: at start, each server is checked against the local tokenizer, chat template and
  context length (a mismatch: exit 2 naming the server);
* :mod:`.affinity`: each document is pinned to one server (consistent hashing with a load bound), so
  its requests share that server's prefix cache;
* :mod:`.completions` and :mod:`.sse`: the request (token ids, streamed) and the stream read back;
* :mod:`.transport`: HTTP, TLS and the API key, and what each kind of failure means;
* :mod:`.endpoints` and :mod:`.load`: each server's state, docsumd's own requests there, and its load
  as its ``/metrics`` say;
* :mod:`.engine`: :class:`~daemon.engine.remote.engine.RemoteEngine`, the
  :class:`~daemon.contracts.EngineClient` that puts them together, with the retry rules.
"""
