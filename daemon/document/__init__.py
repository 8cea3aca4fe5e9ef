"""Documents: raw bytes in, checked text out (decoding and the checks every input passes)."""
