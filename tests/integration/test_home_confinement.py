"""The cache home is a root like any other (issue 26, class 1): a symbolic link planted in it is
never followed for a write. Each attack against the real CLI (``python -m rocmbuild``), with a
directory of canaries outside every root that must keep its entries, their bytes and one link
each:

* ``downloads/<KEY>.part`` a link to the outside directory, for a pull that succeeds and for one
  the cache serves a wrong bundle for (which used to empty the outside directory);
* ``targets`` in the cache home a link to it (the migration moved its entries into ``state/``);
* ``artifacts/imported`` a link to it and ``cache rm KEY`` (which removed the outside ``KEY``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import rb
from tests.support.pushed import push_mini

KEY = "ab" * 32


class Canaries:
    """An outside directory: its entries must stay exactly as made (bytes, one link each)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / KEY).mkdir(parents=True)
        (root / KEY / "manifest.json").write_text('{"canary": true}\n')
        (root / "1234567890abcdef").mkdir()
        (root / "1234567890abcdef" / "lock").write_text("canary lock\n")
        (root / "canary").write_text("canary\n")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, tuple[bytes | None, int]]:
        out = {}
        for p in sorted(self.root.rglob("*")):
            st = os.lstat(p)
            out[p.relative_to(self.root).as_posix()] = (p.read_bytes() if p.is_file() else None, st.st_nlink)
        return out

    def intact(self) -> None:
        now = self.snapshot()
        assert now == self.before, f"the outside directory changed: {sorted(set(now) ^ set(self.before))}"


@pytest.fixture
def pushed(tmp_path, monorepo):
    p = push_mini(tmp_path, monorepo)
    return p.recipe, p.key, p.cache


@pytest.mark.parametrize("served", ["the right bundle", "a wrong bundle"])
def test_a_linked_download_dir_is_refused_and_the_outside_is_untouched(pushed, tmp_path, served):
    recipe, key, cache = pushed
    if served == "a wrong bundle":
        bundle = cache / f"{key}.tar.gz"
        data = bytearray(bundle.read_bytes())
        data[-1] ^= 0xFF
        bundle.write_bytes(bytes(data))
    outside = Canaries(tmp_path / "outside")
    home = Path(os.environ["ROCMBUILD_HOME"])
    (home / "downloads").mkdir(parents=True)
    (home / "downloads" / f"{key}.part").symlink_to(outside.root)
    r = rb("build", str(recipe), "--cache", f"file://{cache}", "--require-cache", "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "symbolic link" in d["error"]["message"] and f"{key}.part" in d["error"]["message"]
    outside.intact()
    assert os.readlink(home / "downloads" / f"{key}.part") == str(outside.root)  # left as it was
    assert not (home / "artifacts" / "imported" / key).exists()


def test_a_linked_targets_dir_in_the_cache_home_is_not_migrated(tmp_path):
    outside = Canaries(tmp_path / "outside")
    home = Path(os.environ["ROCMBUILD_HOME"])
    home.mkdir(parents=True)
    (home / "targets").symlink_to(outside.root)
    r = rb("cache", "dir")
    assert r.returncode == 0, r.stderr
    assert "error:" not in r.stderr and "symbolic link" in r.stderr and "warning" in r.stderr
    outside.intact()
    state_targets = home / "state" / "targets"
    assert not state_targets.exists() or list(state_targets.iterdir()) == []


def test_cache_rm_through_a_linked_imported_dir_removes_nothing_outside(tmp_path):
    outside = Canaries(tmp_path / "outside")
    home = Path(os.environ["ROCMBUILD_HOME"])
    (home / "artifacts").mkdir(parents=True)
    (home / "artifacts" / "imported").symlink_to(outside.root)
    r = rb("cache", "rm", KEY, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    outside.intact()
    r = rb("cache", "gc", "--keep-days", "0", "--json")
    assert r.returncode in (0, 2), (r.stdout, r.stderr)
    outside.intact()


def test_a_download_into_the_cache_never_writes_through_a_planted_link(tmp_path):
    from rocmbuild.sources.archive import download
    from rocmbuild.fs.root import ConfinementError

    src = tmp_path / "source.tar.gz"
    src.write_bytes(b"the source archive\n")
    sha = __import__("hashlib").sha256(src.read_bytes()).hexdigest()
    outside = Canaries(tmp_path / "outside")
    home = Path(os.environ["ROCMBUILD_HOME"])
    (home / "downloads").mkdir(parents=True)
    (home / "downloads" / f"{sha}.part").symlink_to(outside.root / "canary")
    download(src.as_uri(), home / "downloads" / sha, sha)
    outside.intact()  # the planted link was removed as a link, the file made in its place (O_EXCL)
    assert (home / "downloads" / sha).read_bytes() == src.read_bytes()
    assert not (home / "downloads" / sha).is_symlink()

    other = tmp_path / "home2"
    other.mkdir()
    (other / "downloads").symlink_to(outside.root)
    with pytest.raises(ConfinementError):
        download(src.as_uri(), other / "downloads" / sha, sha, home=other)
    outside.intact()


def test_a_linked_targets_dir_in_the_state_home_is_refused(tmp_path):
    from rocmbuild.errors import StatePathError
    from rocmbuild.home import state_home, targets_dir
    from rocmbuild.swap.roots import open_state

    outside = Canaries(tmp_path / "outside")
    state_home().mkdir(parents=True)
    targets_dir(state_home()).symlink_to(outside.root)
    with pytest.raises(StatePathError) as err:
        open_state(targets_dir(state_home()) / "0123456789abcdef", create=True)
    assert "symbolic link" in err.value.message and err.value.exit_code == 2
    outside.intact()
