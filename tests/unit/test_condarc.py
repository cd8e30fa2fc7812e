"""The ``envs_dirs`` reader of ``.condarc`` files and the files conda reads (environment/condarc.py)."""

from __future__ import annotations

from rocmbuild.environment import condarc


def test_block_list_with_quotes_comments_and_other_keys():
    text = ("channels:\n  - conda-forge\n# a comment\nenvs_dirs:   # where envs live\n"
            "  - ~/big/envs\n\n  # skipped\n  - \"/opt/with space/envs\"  \n  - '/q/envs' # note\n"
            "  -\nsolver: libmamba\n  - /not/this\n")
    assert condarc.read_envs_dirs(text) == ["~/big/envs", "/opt/with space/envs", "/q/envs"]


def test_flow_list_and_absent_or_scalar_key():
    assert condarc.read_envs_dirs("envs_dirs: [/a/envs, '/b c/envs', \"/d\"]  # x\n") == ["/a/envs", "/b c/envs", "/d"]
    assert condarc.read_envs_dirs("channels: [x]\n") == []
    assert condarc.read_envs_dirs("envs_dirs: /just/one\n") == []  # not a list: conda refuses it too
    assert condarc.read_envs_dirs("  envs_dirs:\n  - /nested\n") == []  # under another key: not ours


def test_files_in_conda_order_and_variables_expanded(tmp_path, monkeypatch):
    home, prefix, xdg = tmp_path / "home", tmp_path / "prefix", tmp_path / "xdg"
    for d in (home / ".conda", prefix, xdg / "conda" / "condarc.d"):
        d.mkdir(parents=True)
    (home / ".condarc").write_text("envs_dirs:\n  - ~/home-envs\n")
    (home / ".conda" / "condarc").write_text("envs_dirs: [$EXTRA/envs, $UNSET_VAR_X/envs]\n")
    (prefix / ".condarc").write_text("envs_dirs:\n  - /prefix-envs\n")
    (xdg / "conda" / "condarc.d" / "a.yml").write_text("envs_dirs:\n  - /xdg-envs\n")
    rc = tmp_path / "explicit.yml"
    rc.write_text("envs_dirs:\n  - /condarc-envs\n")
    for k, v in {"HOME": home, "CONDA_PREFIX": prefix, "XDG_CONFIG_HOME": xdg, "CONDARC": rc,
                 "EXTRA": tmp_path / "extra", "MAMBA_ROOT_PREFIX": tmp_path / "mamba",
                 "CONDA_ENVS_PATH": "/p1:/p2"}.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("UNSET_VAR_X", raising=False)
    monkeypatch.delenv("CONDA_ENVS_DIRS", raising=False)
    got = [(str(d), src) for d, src in condarc.configured_dirs()]
    assert got[:2] == [("/p1", "$CONDA_ENVS_PATH"), ("/p2", "$CONDA_ENVS_PATH")]
    dirs = [d for d, _ in got]
    # the later file (higher precedence) first, as conda merges lists
    assert dirs[2:] == ["/condarc-envs", "/prefix-envs", str(home / "home-envs"), str(tmp_path / "extra" / "envs"),
                        "/xdg-envs", str(tmp_path / "mamba" / "envs")]
    assert ("/prefix-envs", str(prefix / ".condarc")) in got
