"""The served model's files: checked before the libraries open them, and the local models that
``make-tiny-model`` and ``make-demo-model`` build."""
