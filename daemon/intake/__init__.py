"""What the service lets in: the byte budget of documents read and in progress, and the progress
watch (a daemon that has work and finishes nothing is wedged)."""
