"""Summaries: chunking, prompts, the context budget, profiles and the map-reduce plan."""
