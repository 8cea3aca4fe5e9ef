"""The trust boundary of the document stage: the daemon process keeps a pool of sandboxed worker
processes (:mod:`~daemon.document.sandbox.pool`) and sends them untrusted PDF, DOCX, ODT and HTML
bytes; a worker (:mod:`~daemon.document.sandbox.worker`, the only process that loads
:mod:`daemon.document.extract` and its parsers) answers with text and layout, which the pool checks
before trusting it. The frame protocol of both directions and the check of every reply live in
:mod:`~daemon.document.sandbox.protocol`, which both sides import and which imports no parser."""
