"""`lopa bench`: end to end on tiny prompts, the results.json schema, skipped methods, data selection, perplexity."""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch

from lopa import cli
from lopa.bench import BenchOptions, perplexity, run_benchmark, validate
from lopa.bench import benchmark as bench_module
from lopa.bench.data import BUILTIN, LOPA_SCENARIOS, Scenario, load_questions, select
from lopa.bench.methods import parse_methods
from lopa.bench.suite import Item, encode
from lopa.errors import InvalidRequestError

TINY = [
    {"question_id": 1, "category": "writing", "turns": ["Write one sentence about the sea.", "Now make it rhyme."]},
    {"question_id": 2, "category": "coding", "turns": ["Write a Python function that adds two numbers."]},
]


@pytest.fixture()
def tiny_data(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in TINY) + "\n")
    return path


@pytest.fixture()
def no_llamacpp(monkeypatch):
    """Make `import llama_cpp` fail even where it is installed."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)


def test_cli_end_to_end_writes_valid_results(tiny_data, tmp_path, no_llamacpp, capsys):
    out = tmp_path / "out"
    rc = cli.main(
        [
            "bench",
            "--data",
            str(tiny_data),
            "--methods",
            "hf,ar,lopa,llamacpp",
            "--max-new-tokens",
            "8",
            "--out",
            str(out),
            "--no-progress",
            "--max-verify-tokens",
            "64",
        ]
    )
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert validate(results) == []
    assert results["config"]["dtype"] == "float32"
    assert [p["category"] for p in results["prompts"]] == ["writing", "coding"]
    assert results["methods"]["llamacpp"]["status"] == "skipped"
    assert "llama-cpp-python" in results["methods"]["llamacpp"]["reason"]
    for prompt in results["prompts"]:
        assert set(prompt["runs"]) == {"hf", "ar", "lopa"}
        for run in prompt["runs"].values():
            assert 1 <= run["new_tokens"] <= 8 and run["exact_match"] is True  # all three are lossless
            assert run["prefill_s"] <= run["wall_s"]
    assert results["aggregate"]["hf"]["overall"]["speedup_median"] == pytest.approx(1.0)
    lopa = results["aggregate"]["lopa"]["overall"]
    assert 0 < lopa["draft_share_median"] < 1 and 0 < lopa["verify_share_median"] < 1  # where a lopa step's time goes
    runs = [prompt["runs"]["lopa"] for prompt in results["prompts"]]
    hits, trials = sum(r["predictor_depth1_hits"] for r in runs), sum(r["predictor_depth1_trials"] for r in runs)
    assert trials > 0 and hits <= trials  # the shipped predictor drafts by default
    assert lopa["predictor_depth1_accept"] == pytest.approx(hits / trials)
    assert results["aggregate"]["hf"]["overall"]["predictor_depth1_accept"] is None
    assert set(results["aggregate"]["lopa"]["by_category"]) == {"writing", "coding"}
    report = (out / "report.md").read_text()
    assert "skipped" in report and "## Overall" in report
    assert f"lopa bench --max-verify-tokens 64 --data {tiny_data} --seed 0" in report  # with the model options
    for name in ("speedup_by_category", "tokens_per_forward", "latency_vs_length", "accept_length_hist"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr()
    assert "speedup vs hf" in printed.out and "skipped llamacpp" in printed.err


def test_draft_model_methods_against_assisted_generation(tiny_data, tmp_path, capsys):
    """hf-assisted and lopa-draft with the model drafting for itself: exact, drafts accepted, drafting time reported;
    without --draft-model both are skipped with the reason. A full-precision copy of the target drafting for it does
    not pay on a CPU, so after the warm-up lopa asks it only at a probe: 24 tokens leave room for one."""
    out = tmp_path / "out"
    rc = cli.main(
        [
            "bench",
            "--data",
            str(tiny_data),
            "--categories",
            "coding",
            "--methods",
            "hf,hf-assisted,lopa-draft",
            "--max-new-tokens",
            "24",
            "--draft-model",
            "self",
            "--draft-dtype",
            "float32",
            "--no-predictor",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert validate(results) == []
    for name in ("hf-assisted", "lopa-draft"):
        run = results["prompts"][0]["runs"][name]
        assert run["exact_match"] is True and run["forwards"] < run["new_tokens"], name  # drafts were accepted
        assert 0 < results["aggregate"][name]["overall"]["draft_share_median"] < 1, name
    capsys.readouterr()
    assert (
        cli.main(
            [
                "bench",
                "--data",
                str(tiny_data),
                "--categories",
                "coding",
                "--methods",
                "hf-assisted,lopa-draft",
                "--max-new-tokens",
                "2",
                "--no-predictor",
                "--no-progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "skipped hf-assisted: no draft model" in err and "skipped lopa-draft: no drafter left" in err


def test_schema_rejects_broken_results(engine, tiny_data):
    results = run_benchmark(
        engine,
        BenchOptions(
            data=str(tiny_data), limit=1, categories=["coding"], methods=["hf", "ar"], max_new_tokens=3, progress=False
        ),
    )
    assert validate(results) == []
    broken = copy.deepcopy(results)
    del broken["prompts"][0]["runs"]["ar"]["wall_s"]
    assert any("wall_s" in e for e in validate(broken))
    broken = copy.deepcopy(results)
    broken["aggregate"]["hf"]["overall"]["prompts"] = "one"
    assert any("prompts" in e for e in validate(broken))
    broken = copy.deepcopy(results)
    broken["prompts"][0]["runs"]["ar"]["exact_match"] = 1  # an int is not a boolean
    assert validate(broken)
    broken = copy.deepcopy(results)
    broken["prompts"][0]["runs"]["ar"]["forwards"] = True  # a boolean is not a count
    assert validate(broken)
    broken = copy.deepcopy(results)
    del broken["prompts"][0]["runs"]["ar"]
    assert any("methods" in e for e in validate(broken))


def test_multi_turn_sees_the_reference_answer(engine, tiny_data):
    results = run_benchmark(
        engine,
        BenchOptions(
            data=str(tiny_data),
            categories=["writing"],
            multi_turn=True,
            methods=["hf", "lopa"],
            max_new_tokens=4,
            progress=False,
        ),
    )
    first, second = results["prompts"]
    assert (first["turn"], second["turn"]) == (1, 2)
    answer = engine.tokenizer.decode(first["runs"]["hf"]["token_ids"], skip_special_tokens=True)
    q = load_questions(tiny_data)[0]
    expected = encode(engine, Item(q, 1, 4), [answer], None)
    assert second["prompt_tokens"] == len(expected) > first["prompt_tokens"]


def test_lopa_table_scenarios(engine, monkeypatch):
    """The table mode picks scenario prompts (long documents only for summary) with each scenario's budget."""
    small = tuple(Scenario(s.name, s.categories, 3, s.min_prompt_tokens) for s in LOPA_SCENARIOS)
    monkeypatch.setattr(bench_module, "LOPA_SCENARIOS", small)
    results = run_benchmark(engine, BenchOptions(lopa_table=True, limit=1, methods=["hf", "lopa"], progress=False))
    rows = results["lopa_table"]
    assert [r["scenario"] for r in rows] == ["chat", "code", "summary"]
    summary = [p for p in results["prompts"] if p["scenario"] == "summary"]
    assert summary and all(p["prompt_tokens"] >= 512 and p["category"] == "summarization" for p in summary)
    assert all(p["max_new_tokens"] == 3 for p in results["prompts"])
    assert all(r["ar_ms"] > 0 and r["lopa_ms"] > 0 and r["exact_match_rate"] == 1.0 for r in rows)


def test_builtin_set_covers_the_scenarios(engine):
    questions = load_questions(None)
    categories = {q.category for q in questions}
    for scenario in LOPA_SCENARIOS:
        assert categories & set(scenario.categories), scenario.name
    long_docs = [q for q in questions if q.category == "summarization"]
    assert all(len(encode(engine, Item(q, 0, 1), [], None)) >= 512 for q in long_docs)
    assert BUILTIN.parent.name == "bench"


def test_select_limits_per_category_reproducibly(tmp_path):
    rows = [{"question_id": i, "category": "qa" if i % 2 else "rag", "turns": [f"q{i}"]} for i in range(10)]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    questions = load_questions(path)
    picked = select(questions, None, 2, seed=3)
    assert [q.category for q in picked] == ["rag", "rag", "qa", "qa"]
    assert picked == select(questions, None, 2, seed=3)
    assert [q.category for q in select(questions, ["qa"], None, 0)] == ["qa"] * 5
    with pytest.raises(InvalidRequestError, match="unknown categories"):
        select(questions, ["nope"], None, 0)


@pytest.mark.parametrize(
    "content", ['{"question_id": 1}', "not json", '{"question_id": 1, "category": "a", "turns": []}']
)
def test_bad_data_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.jsonl"
    path.write_text(content + "\n")
    with pytest.raises(InvalidRequestError, match="bad.jsonl:1"):
        load_questions(path)


def test_cli_usage_errors(tiny_data, capsys):
    assert cli.main(["bench", "--methods", "hf,warp-drive"]) == 2
    assert "unknown methods" in capsys.readouterr().err
    assert cli.main(["bench", "--limit", "0"]) == 2
    assert cli.main(["bench", "--data", str(tiny_data) + ".missing"]) == 2
    assert parse_methods("lopa,ar") == ["hf", "lopa", "ar"]


def test_dllm_is_delegated(monkeypatch):
    seen = {}
    monkeypatch.setattr("lopa.diffusion.cli.run_bench", lambda args: seen.setdefault("args", args) and 0)
    assert cli.main(["bench", "--dllm", "some/model", "--limit", "3", "--branches", "2"]) == 0
    assert seen["args"].dllm == "some/model" and seen["args"].limit == 3 and seen["args"].dllm_branches == 2


def test_perplexity_prefers_the_models_own_output(engine):
    prompt = engine.encode_prompt("Name the planets of the solar system.")
    greedy = engine.generate(prompt, max_new_tokens=16, method="ar").token_ids
    scrambled = greedy[::-1]
    own, other = perplexity(engine.model, prompt, greedy), perplexity(engine.model, prompt, scrambled)
    assert 1.0 <= own < other
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt + greedy[:1]])).logits[0, -2]
    assert perplexity(engine.model, prompt, greedy[:1]) == pytest.approx(
        float(torch.exp(-logits.log_softmax(-1)[greedy[0]])), rel=1e-4
    )
