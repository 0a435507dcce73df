"""deploy/ as a cluster would take it, checked offline: every document of deploy/kubernetes.yaml
validates against the Kubernetes API's schemas (kubernetes-validate bundles them; strict, so an
unknown field fails; the version pinned), and every command its containers run exists: the shell
line expanded with sample values of the variables it uses (each set by the container or by
Kubernetes), ``cardinal ...`` and ``torchrun ... -m cardinal.cli ...`` read by the real parsers,
and each ``--set`` key one of the recipe's. deploy/prometheus.yaml is a Prometheus configuration,
not a Kubernetes object: checked to scrape by the annotations the manifest's pods carry."""

import copy
import re
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from cardinal import cli
from cardinal.recipe import load
from helpers.recipes import unknown

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
KUBERNETES = "1.30"  # the oldest version the manifest is meant for (indexed Jobs, gRPC probes)
SAMPLE = {"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "cardinal-ps-1"}  # what Kubernetes sets in the pods
VARIABLE = re.compile(r"\$\{(\w+)(##\*-)?\}|\$(\w+)")


def documents(name: str = "kubernetes.yaml") -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def containers(doc: dict):
    """The containers of a document's pods (a Pod's, or a pod template's)."""
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec)
    return pod.get("containers", [])


def command_line(container: dict) -> list[str]:
    """What the container runs, as argv: a ``sh -c`` line expanded, ``exec`` dropped."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv[:2] != ["sh", "-c"]:
        return argv
    env = {**SAMPLE, **{e["name"]: e.get("value", "x") for e in container.get("env", [])}}

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        assert name in env, f"{container['name']}: ${name} is set by neither the container nor Kubernetes"
        return env[name].rsplit("-", 1)[-1] if m.group(2) else env[name]
    words = shlex.split(VARIABLE.sub(value, " ".join(argv[2:])))
    return words[1:] if words[:1] == ["exec"] else words


def cardinal_args(argv: list[str]) -> list[str]:
    """The arguments ``cardinal`` gets, checking torchrun's own on the way."""
    if argv[0] == "cardinal":
        return argv[1:]
    if argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        args = parse(get_args_parser(), argv[1:], "torchrun")
        assert args.module and args.training_script == "cardinal.cli", argv
        return args.training_script_args
    raise AssertionError(f"a container runs {argv[0]!r}, neither cardinal nor torchrun")


def parse(parser, argv: list[str], what: str):
    try:
        return parser.parse_args(argv)
    except SystemExit:  # argparse printed why
        raise AssertionError(f"{what} refuses {shlex.join(argv)}") from None


def check_command(argv: list[str]) -> None:
    args = parse(cli.parser(), cardinal_args(argv), "cardinal")
    sets = getattr(args, "set", [])
    recipe = load(args.recipe, []).to_dict() if hasattr(args, "recipe") else {}
    missing = [s.split("=", 1)[0] for s in sets if unknown(s.split("=", 1)[0], recipe)]
    assert not missing, f"{shlex.join(argv)}: no such recipe keys: {missing}"
    if sets:
        load(args.recipe, sets)  # and each value is one the key takes


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_document_of_the_manifest_validates(doc):
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_validation_sees_a_broken_field():
    job = next(d for d in documents() if d["kind"] == "Job")
    renamed, mistyped = copy.deepcopy(job), copy.deepcopy(job)
    renamed["spec"]["completion"] = renamed["spec"].pop("completions")
    containers(mistyped)[0]["ports"][0]["containerPort"] = "7000"
    for broken, where in ((renamed, "'completion' was unexpected"), (mistyped, "'7000' is not of type 'integer'")):
        with pytest.raises(kubernetes_validate.ValidationError, match=where):
            kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_every_command_and_flag_the_manifest_runs_exists():
    argvs = [command_line(c) for d in documents() for c in containers(d)]
    assert [a[:2] for a in argvs] == [["cardinal", "server"], ["torchrun", "--nnodes"]]
    assert "1/2" in argvs[0]  # the shard from the pod's completion index
    for argv in argvs:
        check_command(argv)


@pytest.mark.parametrize("edit, refused", [
    (lambda a: [w.replace("--data-dir", "--data_dir") for w in a], "cardinal refuses"),
    (lambda a: [w.replace("ps.metrics_port", "ps.metric_port") for w in a], r"recipe keys: \['ps.metric_port'\]"),
    (lambda a: [w.replace("--port", "--prot") for w in a], "cardinal refuses"),
], ids=["flag", "recipe-key", "another-flag"])
def test_the_command_check_sees_a_wrong_flag_or_key(edit, refused):
    server = command_line(containers(next(d for d in documents() if d["kind"] == "Job"))[0])
    with pytest.raises(AssertionError, match=refused):
        check_command(edit(server))


def test_torchrun_flags_are_checked_too():
    workers = next(d for d in documents() if d["metadata"]["name"] == "cardinal-workers" and d["kind"] == "Job")
    argv = command_line(containers(workers)[0])
    with pytest.raises(AssertionError, match="torchrun refuses"):
        cardinal_args([w.replace("--nproc-per-node", "--procs-per-node") for w in argv])


def test_prometheus_scrapes_by_the_annotations_the_pods_carry():
    (scrape,) = documents("prometheus.yaml")[0]["scrape_configs"]
    kept = {r["source_labels"][0] for r in scrape["relabel_configs"] if r.get("action") == "keep"}
    pods = [d["spec"]["template"] for d in documents() if "template" in d.get("spec", {})]
    assert kept == {"__meta_kubernetes_pod_annotation_prometheus_io_scrape"} and pods
    for pod in pods:  # scraped, at the port its process serves metrics on (ps.metrics_port, metrics.port)
        annotations = pod["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        served = [re.search(r"metrics(?:_|\.)port=(\d+)", " ".join(command_line(c))) for c in pod["spec"]["containers"]]
        assert [m.group(1) for m in served if m] == [annotations["prometheus.io/port"]], pod["metadata"]
