"""The engine stage: vLLM itself, the processes it starts, admission, the byte budget, and the
progress watch (a daemon that has work and finishes nothing is wedged)."""
