"""The manual's site (issue #64): `mkdocs build --strict` (Material theme) of docs/ as mkdocs.yml lays it out, with no
broken link, no missing anchor and no page left out of the navigation, every runbook and reference page rendered; and
a page with a broken link fails the build (strict is on, not a warning nobody reads)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_the_site_builds_strictly_with_every_runbook_and_reference(tmp_path: Path) -> None:
    done = build(CHECKOUT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    for page in sorted((CHECKOUT / "docs" / "runbooks").glob("*.md")):
        name = "" if page.stem == "README" else page.stem
        assert (site / "runbooks" / name / "index.html").is_file(), page.name
    assert (site / "reference" / "cli" / "index.html").is_file()
    assert (site / "reference" / "config.schema.json").read_bytes() == (
        CHECKOUT / "docs" / "reference" / "config.schema.json"
    ).read_bytes()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(CHECKOUT / "docs", tmp_path / "docs")
    shutil.copy2(CHECKOUT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the upgrade guide](upgrading.md).\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "upgrading.md" in done.stdout + done.stderr


def test_the_readme_is_a_front_page_whose_links_reach_the_manual() -> None:
    """README is what a newcomer reads first (issue #64): short, and each of its links (to the manual's pages, the
    screenshots, ARCHITECTURE.md) names a file in the checkout; the site's own links are the strict build's."""
    readme = (CHECKOUT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert "docs/tutorials/first-link.md" in local and "docs/guides/install.md" in local
    assert [t for t in local if not (CHECKOUT / t).exists()] == []
