"""Free whitespace in vLLM's JSON-schema decoding: the engine-level ``disable_any_whitespace`` against
the per-request option (which the xgrammar backend does not read), on the CPU engine.

16 short chat prompts asking for a small bounded JSON object, 400 tokens at most, offline
``vllm.LLM``: the share of outputs that parse strictly and validate, how many ran out of tokens, the
wall time. ``ENGINE`` is ``on``, ``off`` (the engine setting given as false) or ``unset``; ``REQUEST``
``on`` sets the per-request option.

    .venv/bin/python -m bench.structured_whitespace MODEL {on,off,unset} {on,off} [--count N]
        [--temperature T] [--json FILE]

Figures: bench/RESULTS.md#structured-whitespace.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Final

import jsonschema

SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 80},
        "points": {"type": "array", "items": {"type": "string", "maxLength": 120}, "maxItems": 4},
        "kind": {"enum": ["contract", "paper", "other"]},
    },
    "required": ["title", "points", "kind"],
    "additionalProperties": False,
}


def main(argv: list[str] | None = None) -> int:
    """Run the prompts once and print one JSON line of figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="the model folder (e.g. the demo model's)")
    parser.add_argument("engine", choices=("on", "off", "unset"), help="the engine's disable_any_whitespace")
    parser.add_argument("request", choices=("on", "off"), help="the per-request disable_any_whitespace")
    parser.add_argument("--count", type=int, default=16, help="prompts")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here, stamped")
    args = parser.parse_args(argv)
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from bench.lib.results import write_result

    model, engine_setting, request_setting = args.model, args.engine, args.request
    count, temperature = args.count, args.temperature
    kwargs: dict[str, Any] = {
        "model": model,
        "dtype": "bfloat16",
        "max_model_len": 2048,
        "max_num_seqs": 16,
        "enforce_eager": True,
        "kv_cache_memory_bytes": 1 << 29,
        "seed": 0,
    }
    if engine_setting != "unset":
        kwargs["structured_outputs_config"] = {
            "backend": "xgrammar",
            "disable_any_whitespace": engine_setting == "on",
        }
    llm = LLM(**kwargs)
    tokenizer = llm.get_tokenizer()
    ask = "Describe document number {} about licences as JSON with title, points and kind."
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": ask.format(i)}], tokenize=False, add_generation_prompt=True
        )
        for i in range(count)
    ]
    params = SamplingParams(
        max_tokens=400,
        temperature=temperature,
        structured_outputs=StructuredOutputsParams(
            json=SCHEMA, disable_any_whitespace=request_setting == "on"
        ),
    )
    started = time.monotonic()
    outputs = llm.generate(prompts, params)
    wall = time.monotonic() - started
    valid, cut_off, problems = 0, 0, []
    for output in outputs:
        completion = output.outputs[0]
        cut_off += completion.finish_reason == "length"
        try:
            jsonschema.validate(json.loads(completion.text), SCHEMA)
            valid += 1
        except (ValueError, jsonschema.ValidationError) as exc:
            problems.append(f"{type(exc).__name__}: {str(exc)[:120]}")
    figures = {"model": model, "engine": engine_setting, "request": request_setting, "prompts": count}
    figures |= {"valid": valid, "cut_off": cut_off, "wall_s": round(wall, 2), "problems": problems}
    print(json.dumps(figures))
    if args.json is not None:
        write_result(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
