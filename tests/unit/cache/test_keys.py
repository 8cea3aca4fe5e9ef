"""Cache keys (daemon.cache.keys): the same inputs give the same key, a change of anything that changes
an output gives another, and the model's revision is read from its files."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.cache import keys as keys_module
from daemon.cache.keys import (
    NUMERIC_ARGUMENTS,
    SCHEDULING_ARGUMENTS,
    SCHEDULING_EXTRA_ARGUMENTS,
    CacheKey,
    KeyMaker,
    KeyScope,
    ModelRevision,
    Step,
    engine_numerics,
    folder_fingerprint,
    model_revision,
    sha256_of,
)
from daemon.config import EngineConfig, SpeculativeConfig
from daemon.contracts import Sampling
from daemon.engine.vllm_args import TYPED_ARGUMENTS, engine_kwargs

MODEL = ModelRevision(digest="0123456789abcdef", how="folder", files=3)
SAMPLING = Sampling(max_tokens=256, temperature=0.3, top_p=0.9, repetition_penalty=1.1)
STEP = Step(
    template=([1, 2, 3], [4, 5]), sampling=SAMPLING, prompt_version="summary-v4", profile_version="abc"
)
ENGINE = engine_kwargs(EngineConfig(model="/models/m", dtype="bfloat16"))
TEXT_IDS = [101, 102, 103, 104]


def maker(engine: dict[str, Any] | None = None, **scope: Any) -> KeyMaker:
    options: dict[str, Any] = {"model": MODEL, **scope}
    return KeyMaker(KeyScope.create(ENGINE if engine is None else engine, **options))


def test_the_same_inputs_give_the_same_key() -> None:
    first, second = maker(), maker()
    assert first.part(TEXT_IDS, STEP) == second.part(list(TEXT_IDS), dataclasses.replace(STEP))
    assert first.part("some text", STEP) == second.part("some text", STEP)
    child = first.part(TEXT_IDS, STEP)
    assert first.combine([child], STEP, labels=["[Part 1]"]) == second.combine(
        [child], STEP, labels=["[Part 1]"]
    )
    digest = sha256_of([b"input ", b"bytes"])
    assert digest == hashlib.sha256(b"input bytes").digest()
    settings = {"profile_version": "abc", "max_model_len": 4096}
    assert first.document(digest, settings=settings, options={}) == second.document(
        digest, settings=dict(reversed(settings.items())), options={}
    )


def test_a_key_names_its_kind_and_schema() -> None:
    key = maker().part(TEXT_IDS, STEP)
    assert key.id.startswith("v1:part:")
    assert len(key.digest) == 64
    assert key.parts["model_revision"] == MODEL.digest
    assert key.parts["prompt_version"] == "summary-v4"
    assert key.parts["profile_version"] == "abc"


def _sampling_changed(name: str, value: Any) -> Callable[[Step], Step]:
    def change(step: Step) -> Step:
        return dataclasses.replace(step, sampling=dataclasses.replace(step.sampling, **{name: value}))

    return change


STEP_CHANGES: dict[str, Callable[[Step], Step]] = {
    "template prefix": lambda s: dataclasses.replace(s, template=([1, 2, 9], [4, 5])),
    "template suffix": lambda s: dataclasses.replace(s, template=([1, 2, 3], [4, 6])),
    "prompt version": lambda s: dataclasses.replace(s, prompt_version="summary-v5"),
    "profile version": lambda s: dataclasses.replace(s, profile_version="abd"),
    **{
        f"sampling {name}": _sampling_changed(name, value)
        for name, value in {
            "max_tokens": 257,
            "temperature": 0.0,
            "top_p": 0.95,
            "repetition_penalty": 1.0,
            "seed": 7,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.5,
            "stop": ("END",),
            "json_schema": '{"type": "object"}',
        }.items()
    },
}


@pytest.mark.parametrize("change", list(STEP_CHANGES))
def test_any_setting_of_a_request_changes_part_and_combine_keys(change: str) -> None:
    keys = maker()
    other = STEP_CHANGES[change](STEP)
    assert other != STEP
    assert keys.part(TEXT_IDS, other) != keys.part(TEXT_IDS, STEP)
    child = keys.part(TEXT_IDS, STEP)
    assert keys.combine([child], other) != keys.combine([child], STEP)


def test_every_sampling_field_is_covered_by_a_test() -> None:
    covered = {name.removeprefix("sampling ") for name in STEP_CHANGES if name.startswith("sampling ")}
    assert covered == {field.name for field in dataclasses.fields(Sampling)}


SCOPE_CHANGES: dict[str, Callable[[], KeyMaker]] = {
    "model revision": lambda: maker(model=dataclasses.replace(MODEL, digest="fedcba9876543210")),
    "tokenizer revision": lambda: maker(tokenizer=ModelRevision("1111111111111111", "folder", 2)),
    "namespace": lambda: maker(namespace="team-b"),
    "dtype": lambda: maker({**ENGINE, "dtype": "float16"}),
    "quantization": lambda: maker({**ENGINE, "quantization": "fp8"}),
    "kv_cache_dtype": lambda: maker({**ENGINE, "kv_cache_dtype": "fp8"}),
    "load_format": lambda: maker({**ENGINE, "load_format": "dummy"}),
    "engine seed": lambda: maker({**ENGINE, "seed": 1}),
    "speculative decoding": lambda: maker(
        engine_kwargs(
            EngineConfig(
                model="/models/m",
                dtype="bfloat16",
                speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=2),
            )
        )
    ),
    "structured outputs backend": lambda: maker(
        engine_kwargs(
            EngineConfig(model="/models/m", dtype="bfloat16", structured_outputs_backend="guidance")
        )
    ),
    "an [engine.extra] argument": lambda: maker({**ENGINE, "hf_overrides": {"rope_theta": 1e6}}),
}


@pytest.mark.parametrize("change", list(SCOPE_CHANGES))
def test_model_engine_numerics_and_namespace_change_every_key(change: str) -> None:
    base, other = maker(), SCOPE_CHANGES[change]()
    assert other.scope.digest != base.scope.digest
    assert other.part(TEXT_IDS, STEP) != base.part(TEXT_IDS, STEP)
    assert other.part("text", STEP) != base.part("text", STEP)
    digest = sha256_of([b"x"])
    assert other.document(digest, settings={}, options={}) != base.document(digest, settings={}, options={})


@pytest.mark.parametrize(
    "setting",
    [
        {"max_num_seqs": 256},
        {"max_num_batched_tokens": 16384},
        {"enable_prefix_caching": False},
        {"gpu_memory_utilization": 0.5},
        {"tensor_parallel_size": 2},
        {"enforce_eager": True},
        {"max_model_len": 32768, "stream_interval": 32768},
        {"served_model_name": "another-name"},
        {"model": "/copies/m"},
        {"scheduling_policy": "priority"},
    ],
)
def test_scheduling_and_memory_settings_keep_the_keys(setting: dict[str, Any]) -> None:
    assert maker({**ENGINE, **setting}).part(TEXT_IDS, STEP) == maker().part(TEXT_IDS, STEP)


def test_every_engine_argument_docsumd_sets_is_classified() -> None:
    """A new typed engine key must be placed in one list: it changes outputs, or only scheduling."""
    assert not NUMERIC_ARGUMENTS & SCHEDULING_ARGUMENTS
    assert not (NUMERIC_ARGUMENTS | SCHEDULING_ARGUMENTS) & SCHEDULING_EXTRA_ARGUMENTS
    every = engine_kwargs(
        EngineConfig(
            model="/m",
            quantization="fp8",
            kv_cache_memory_bytes=1 << 30,
            speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=2),
        )
    )
    assert set(every) | set(TYPED_ARGUMENTS) <= NUMERIC_ARGUMENTS | SCHEDULING_ARGUMENTS
    assert set(engine_numerics(every)) == NUMERIC_ARGUMENTS


def test_unknown_extra_arguments_are_assumed_to_matter() -> None:
    assert engine_numerics({"dtype": "bfloat16", "some_future_argument": 1, "async_scheduling": True}) == {
        "dtype": "bfloat16",
        "some_future_argument": 1,
    }


def test_content_text_and_token_ids_never_collide() -> None:
    keys = maker()
    assert keys.part("ab", STEP) != keys.part([ord("a"), ord("b")], STEP)
    assert keys.part("", STEP) != keys.part([], STEP)


def test_one_token_or_character_of_content_changes_the_key() -> None:
    keys = maker()
    assert keys.part([*TEXT_IDS, 1], STEP) != keys.part(TEXT_IDS, STEP)
    assert keys.part(TEXT_IDS[::-1], STEP) != keys.part(TEXT_IDS, STEP)
    assert keys.part("Clause 4: 30 days", STEP) != keys.part("Clause 4: 60 days", STEP)


def test_fields_cannot_run_into_each_other() -> None:
    """Moving a token from the template's prefix into the content is another request, another key."""
    keys = maker()
    moved = dataclasses.replace(STEP, template=([1, 2], [4, 5]))
    assert keys.part([3, *TEXT_IDS], moved) != keys.part(TEXT_IDS, STEP)


def test_combine_keys_follow_their_children() -> None:
    keys = maker()
    a, b, c = (keys.part([i], STEP) for i in (1, 2, 3))
    base = keys.combine([a, b], STEP, labels=["[Part 1]", "[Part 2]"])
    assert keys.combine([b, a], STEP, labels=["[Part 1]", "[Part 2]"]) != base
    assert keys.combine([a, c], STEP, labels=["[Part 1]", "[Part 2]"]) != base
    assert keys.combine([a, b], STEP, labels=["[Part 1: page 2]", "[Part 2]"]) != base
    assert keys.combine([a, b], STEP, labels=["[Part 1]", "[Part 2]"], verbatim=[7, 8]) != base
    assert keys.combine([a, b], STEP, labels=["[Part 1][", "Part 2]"]) != base
    assert keys.combine([a, b], STEP) != base
    assert base.kind == "combine"
    # A part's key and a combine step's never meet, whatever their inputs.
    assert keys.combine([], STEP).digest != keys.part([], STEP).digest
    with pytest.raises(ValueError, match="labels"):
        keys.combine([a, b], STEP, labels=["[Part 1]"])


def test_a_levels_key_changes_with_an_edit_below_it_and_only_there() -> None:
    keys = maker()
    parts = [keys.part([i, i + 1], STEP) for i in range(6)]
    edited = [*parts[:3], keys.part([99], STEP), *parts[4:]]
    left, right = keys.combine(parts[:3], STEP), keys.combine(parts[3:], STEP)
    assert keys.combine(edited[:3], STEP) == left
    assert keys.combine(edited[3:], STEP) != right
    top = keys.combine([left, right], STEP)
    assert keys.combine([left, keys.combine(edited[3:], STEP)], STEP) != top


def test_document_keys_hold_bytes_settings_options_and_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = maker()
    digest = sha256_of([b"the contract"])
    settings = {"profile_version": "abc", "max_model_len": 4096, "strategy": "map_reduce"}
    base = keys.document(digest, settings=settings, options={})
    assert base.kind == "document"
    assert keys.document(sha256_of([b"the contract."]), settings=settings, options={}) != base
    assert keys.document(digest, settings={**settings, "max_model_len": 8192}, options={}) != base
    assert keys.document(digest, settings=settings, options={"style": "bullets"}) != base
    monkeypatch.setattr(keys_module, "__version__", "9.9.9")
    assert keys.document(digest, settings=settings, options={}) != base
    with pytest.raises(ValueError, match="SHA-256"):
        keys.document(b"the contract", settings=settings, options={})
    with pytest.raises(TypeError):
        keys.document(digest, settings={"not json": object()}, options={})


def test_keys_are_plain_values() -> None:
    key = maker().part(TEXT_IDS, STEP)
    assert key == CacheKey("part", key.digest)  # parts are not compared
    assert str(key) == key.id
    assert len({key, CacheKey("part", key.digest)}) == 1


# -- the model's revision -------------------------------------------------------------------------


def write_model(folder: Path, weights: bytes = b"\x01" * 5000) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_the_fingerprint_is_the_files_not_their_place_or_times(tmp_path: Path) -> None:
    first = write_model(tmp_path / "a")
    second = write_model(tmp_path / "elsewhere" / "b")
    os.utime(second / "model.safetensors", (1_000_000, 1_000_000))
    (second / ".cache").mkdir()
    (second / ".cache" / "lock").write_text("ignored")
    (second / ".gitattributes").write_text("ignored")
    assert folder_fingerprint(first) == folder_fingerprint(second)
    digest, files = folder_fingerprint(first)
    assert files == 3
    assert len(digest) == 16


@pytest.mark.parametrize(
    "change",
    [
        lambda m: (m / "config.json").write_text('{"model_type": "llama", "rope_theta": 1}'),
        lambda m: (m / "tokenizer.json").write_text('{"version": "1.1"}'),
        lambda m: (m / "model.safetensors").write_bytes(b"\x01" * 4999 + b"\x02"),
        lambda m: (m / "generation_config.json").write_text("{}"),
        lambda m: (m / "config.json").rename(m / "config2.json"),
    ],
)
def test_a_changed_file_is_a_new_revision(tmp_path: Path, change: Callable[[Path], Any]) -> None:
    model = write_model(tmp_path / "m")
    before = folder_fingerprint(model)
    change(model)
    assert folder_fingerprint(model) != before


def test_large_weights_are_sampled_and_still_seen_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keys_module, "_WHOLE_FILE_BYTES", 64 << 10)
    size = 4 << 20
    model = write_model(tmp_path / "m", weights=bytes(size))
    before = folder_fingerprint(model)
    # A change anywhere a fine-tune would touch (a whole tensor's span) is seen, wherever it lies.
    with (model / "model.safetensors").open("r+b") as weights:
        weights.seek(size // 2)
        weights.write(b"\x07" * (64 << 10))
    assert folder_fingerprint(model) != before


def test_a_hub_cache_link_is_read_by_its_blob_name(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    name = hashlib.sha256(b"weights").hexdigest()
    (blobs / name).write_bytes(b"weights")
    snapshot = tmp_path / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(blobs / name)
    before = folder_fingerprint(snapshot)
    (blobs / name).write_bytes(b"WEIGHTS")  # the same blob name stands for the content
    assert folder_fingerprint(snapshot) == before


def test_model_revision_of_a_folder_and_of_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_model(tmp_path / "m")
    revision = model_revision(str(model))
    assert revision is not None
    assert revision.how == "folder"
    assert revision.digest == folder_fingerprint(model)[0]
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    single = model_revision(str(gguf))
    assert single is not None
    assert single.how == "file"
    gguf.write_bytes(b"GGUF" + bytes(99) + b"\1")
    changed = model_revision(str(gguf))
    assert changed is not None
    assert changed.digest != single.digest
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert model_revision("nobody/no-such-model-xyz") is None


def test_model_revision_of_a_model_id_in_the_local_hub_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = tmp_path / "hub"
    repo = hub / "models--someone--small-model"
    commit = "0" * 40
    write_model(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    revision = model_revision("someone/small-model")
    assert revision is not None
    assert revision.how == "hub_snapshot"
    assert revision.digest == folder_fingerprint(repo / "snapshots" / commit)[0]
