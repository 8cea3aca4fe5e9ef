"""The engine stage: vLLM itself, its arguments, the processes it starts (and their reaper), and
admission."""
