"""The README fits on a few screens and every page it points to is there: README.md under
300 lines, every docs/ page linked from it, every relative link (and heading anchor) in the
README and docs/ resolving, each `<!-- section -->` once, a local `pip install` that names
the clone's own folder, and the plain Prometheus config of docs/prometheus.md accepted by
promtool with tfobs's rule file."""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_readme_is_a_few_screens() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 300, len(lines)
    assert max(len(line) for line in lines) <= 400


def test_readme_and_the_docs_index_link_every_page() -> None:
    readme = README.read_text()
    index = (ROOT / "docs" / "README.md").read_text()
    for page in DOCS:
        if page.name == "README.md":
            continue
        assert f"](docs/{page.name}" in readme, page.name
        assert f"]({page.name}" in index, page.name


def test_every_relative_link_resolves() -> None:
    for page in [README, *DOCS]:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), (page.name, target)
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), (page.name, target)


def test_each_section_lives_on_exactly_one_page() -> None:
    seen: dict[str, str] = {}
    for page in DOCS:
        text = page.read_text()
        for name in re.findall(r"<!-- section: ([\w-]+)", text):
            assert name not in seen, (name, seen.get(name), page.name)
            assert f"<!-- /section: {name} -->" in text, (page.name, name)
            seen[name] = page.name
    # The sections the tests read tables and snippets from.
    assert {"install", "usage", "options", "metrics", "analyze", "advice", "keep", "gpu",
            "traces", "dashboards", "multiworker", "grafana-tour", "kubernetes",
            "reliability", "prometheus", "frameworks"} <= set(seen)


def test_local_installs_name_a_folder_pip_can_install() -> None:
    # `pip install "./tfobs[all]"` run inside a clone looked for a project in the package
    # folder; a local install must name the clone's root (a folder with pyproject.toml).
    for page in [README, *DOCS]:
        for spec in re.findall(r"pip install (?:-e )?\"(\.[^\"\[]*)\[", page.read_text()):
            assert (ROOT / spec / "pyproject.toml").exists(), (page.name, spec)


def test_plain_prometheus_config_passes_promtool(tmp_path: pathlib.Path) -> None:
    text = (ROOT / "docs" / "prometheus.md").read_text()
    (config,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    # As the page says: saved beside a clone named tfobs.
    (tmp_path / "tfobs").symlink_to(ROOT)
    (tmp_path / "prometheus.yml").write_text(config)
    run = subprocess.run(["promtool", "check", "config", "prometheus.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr and "rules found" in run.stdout + run.stderr
