"""Build a tiny random-weight model and a tokenizer trained on local text, fully offline.

For demos and tests on machines that cannot reach a model hub. The model is a 2-layer Qwen2-shaped
causal LM (about 7 MB): vLLM serves it like any other Qwen2 model, so the whole pipeline (chat
template, tokenization, chunked prefill, prefix caching, sampling) runs for real, while the text it
writes is random. Nothing is downloaded: the tokenizer is trained on the sample documents shipped with
docsumd plus text files found on the machine (licence texts, the Python standard library's sources).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS: Final = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SAMPLES_DIR: Final = Path(__file__).parent.parent / "samples"  # daemon/samples
_TRAINING_TEXT_BYTES: Final = 8 * 1024 * 1024


def training_texts(limit_bytes: int = _TRAINING_TEXT_BYTES) -> Iterator[str]:
    """Yield local text for tokenizer training, samples first, up to about ``limit_bytes``."""
    candidates: list[Path] = sorted(SAMPLES_DIR.glob("*.txt"))
    candidates += sorted(Path("/usr/share/common-licenses").glob("*"))
    # The standard library's own sources: present wherever Python is, English prose and code.
    candidates += sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    seen = 0
    for path in candidates:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        yield text
        seen += len(text)
        if seen >= limit_bytes:
            return


def build_tiny_model(
    output_dir: Path,
    *,
    vocab_size: int = 8192,
    hidden_size: int = 256,
    num_layers: int = 2,
    max_position_embeddings: int = 32768,
    seed: int = 0,
) -> Path:
    """Write a tokenizer and a random Qwen2 model to ``output_dir``; return the folder.

    Deterministic for a given seed and training text. Takes a few seconds on two CPU cores.
    """
    # Heavy imports stay local: the CLI's other commands should not pay for torch.
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    output_dir.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_texts(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=max_position_embeddings,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(output_dir)

    torch.manual_seed(seed)
    head_dim = 64
    config_kwargs: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // head_dim,
        num_key_value_heads=max(1, hidden_size // head_dim // 2),
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="bfloat16",
    )
    model: Any = Qwen2ForCausalLM(Qwen2Config(**config_kwargs))
    model.to(dtype=torch.bfloat16)
    model.save_pretrained(output_dir)
    (output_dir / "README.md").write_text(
        "A tiny random-weight Qwen2-shaped model built by `docsumd make-tiny-model` for tests and demos.\n"
        "Its output is random text. It says nothing about summary quality.\n",
        encoding="utf-8",
    )
    return output_dir
