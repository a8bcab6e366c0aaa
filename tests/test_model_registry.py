"""Model registry and `gpse-dgl models fetch`, against a real HTTP server on 127.0.0.1.

The server (http.server in a thread) serves a small randomly initialised PyG ``GPSE`` saved the way
the authors' files are (``{"model_state": {"model." + key: tensor}}``), a truncated copy of it (the full
Content-Length announced, half the bytes sent), a checkpoint of another architecture, and an HTML page.
"""
from __future__ import annotations

import http.server
import threading

import pytest
import torch

from test_encode_cli import _run

from gpse_dgl.encode import load_gpse
from gpse_dgl.encode.fetch import ModelDownloadError, fetch_model
from gpse_dgl.encode.models import (
    DEFAULT_MODEL, ModelNotFetchedError, ModelSpec, UnknownModelError, available_models, get_model,
    model_path, models_dir, register_model, resolve_checkpoint, unregister_model)

AUTHORS = ("molpcba", "zinc", "pcqm4mv2", "geom", "chembl")


def _pyg_standin(layers: int, width: int) -> bytes:
    import io

    from torch_geometric.nn import GPSE as PyGGPSE

    torch.manual_seed(0)
    model = PyGGPSE(dim_inner=width, layers_mp=layers, multi_head_dim_inner=8)
    buffer = io.BytesIO()
    torch.save({"model_state": {"model." + k: v for k, v in model.state_dict().items()}}, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server():
    good, other = _pyg_standin(2, 16), _pyg_standin(3, 16)
    files = {"/good.pt": (good, len(good)), "/truncated.pt": (good[:len(good) // 2], len(good)),
             "/other.pt": (other, len(other)), "/page.html": (b"<html>moved</html>", 18)}
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            if self.path not in files:
                self.send_error(404)
                return
            body, announced = files[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits, len(good)
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def standin(server, tmp_path, monkeypatch):
    """A registered 2 x 16 authors-format model served by the local server; models cache in tmp_path."""
    monkeypatch.setenv("GPSE_DGL_CACHE", str(tmp_path / "cache"))
    url, _, _ = server
    register_model(ModelSpec(name="standin", num_layers=2, dim_hidden=16, training_data="nothing",
                             heldout_r2="not published", source="test server", file_name="gpse_model_standin.pt",
                             format="authors", url=f"{url}/good.pt"), overwrite=True)
    yield url
    unregister_model("standin")


def _left_in_cache() -> list[str]:
    folder = models_dir()
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_registry_has_the_shipped_and_the_authors_models():
    assert {"quickstart", *AUTHORS} <= set(available_models())
    for name in AUTHORS:
        spec = get_model(name)
        assert spec.url == f"https://zenodo.org/record/8145095/files/gpse_model_{name}_1.0.pt"
        assert (spec.num_layers, spec.dim_hidden, spec.format) == (20, 512, "authors")
    assert get_model("QuickStart").shipped


@pytest.mark.parametrize("name", [DEFAULT_MODEL, "quickstart"])
def test_shipped_models_load_with_their_registered_size(name):
    """Each shipped asset is the model its registry entry describes, and small enough to ship (<= 25 MB)."""
    spec = get_model(name)
    path = model_path(spec)
    assert spec.shipped and path.stat().st_size <= 25 * 2**20
    model = load_gpse(name)
    assert (model.num_layers, model.dim_hidden) == (spec.num_layers, spec.dim_hidden)
    assert model.checkpoint_info.name == name


def test_registered_urls_are_the_ones_pyg_uses():
    from torch_geometric.nn.models.gpse import GPSE as PyGGPSE

    assert {name: get_model(name).url for name in AUTHORS} == PyGGPSE.url_dict


def test_names_and_paths_resolve(tmp_path, standin):
    with pytest.raises(UnknownModelError, match="registered models: .*molpcba.*quickstart"):
        resolve_checkpoint("no-such-model")
    with pytest.raises(ModelNotFetchedError, match="models fetch standin.*put gpse_model_standin.pt"):
        resolve_checkpoint("standin")
    # an existing file wins over a name; a path-like string is passed on as a path
    (tmp_path / "standin").write_bytes(b"x")
    assert resolve_checkpoint(str(tmp_path / "standin")) == (tmp_path / "standin", None)
    assert resolve_checkpoint("runs/x/best.pt")[0].name == "best.pt"
    path, spec = resolve_checkpoint("quickstart")
    assert spec.name == "quickstart" and path.name == "gpse_quickstart.pt"


def test_fetch_verifies_then_installs(standin):
    path = fetch_model("standin", progress=False)
    assert path == models_dir() / "gpse_model_standin.pt" and _left_in_cache() == ["gpse_model_standin.pt"]
    model = load_gpse("standin")
    assert (model.num_layers, model.dim_hidden) == (2, 16)
    assert model.checkpoint_info.name == "standin" and model.checkpoint_info.format == "authors"
    assert fetch_model("standin", url=standin + "/page.html") == path   # present and valid: kept


@pytest.mark.parametrize("served, message", [
    ("/truncated.pt", "truncated"),
    ("/other.pt", r"3 x 16 .* expected 2 x 16 .*wrong file"),
    ("/page.html", "not a usable GPSE checkpoint"),
    ("/missing.pt", "cannot download standin .*Not Found"),
])
def test_bad_downloads_are_removed(standin, served, message):
    with pytest.raises(ModelDownloadError, match=message):
        fetch_model("standin", url=standin + served, progress=False)
    assert _left_in_cache() == []


def test_known_size_is_checked(standin, server):
    spec = get_model("standin")
    register_model(ModelSpec(**{**spec.__dict__, "size_bytes": server[2] + 1}), overwrite=True)
    with pytest.raises(ModelDownloadError, match="expected"):
        fetch_model("standin", progress=False)
    assert _left_in_cache() == []


def test_offline_is_one_line_naming_where_to_put_the_file(standin):
    import socket

    with socket.socket() as sock:  # a port on loopback that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModelDownloadError) as exc:
        fetch_model("standin", url=f"http://127.0.0.1:{port}/good.pt", progress=False, timeout=5)
    msg = str(exc.value)
    assert "\n" not in msg and str(models_dir() / "gpse_model_standin.pt") in msg
    assert _left_in_cache() == []


def test_cli_lists_fetches_and_encodes_by_name(standin, tmp_path, capsys):
    code, out, _ = _run(["models"], capsys)
    assert code == 0 and f"{DEFAULT_MODEL} (default)" in out and "standin" in out and "zenodo.org" in out
    code, out, err = _run(["models", "fetch", "standin"], capsys)
    assert code == 0 and "verified" in out, err
    smi = tmp_path / "m.smi"
    smi.write_text("CCO\nc1ccccc1\n")
    code, _, err = _run(["encode", "--smiles", str(smi), "--checkpoint", "standin", "--out",
                         str(tmp_path / "o.bin")], capsys)
    assert code == 0 and "registered model 'standin'" in err
    assert len([line for line in err.splitlines() if line.startswith("model:")]) == 1
    code, _, err = _run(["encode", "--smiles", str(smi), "--checkpoint", "nonsense", "--out",
                         str(tmp_path / "o.bin")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "quickstart" in err and "molpcba" in err


def test_downstream_checkpoint_accepts_a_name(standin):
    from gpse_dgl.train.downstream.features import checkpoint_identity

    fetch_model("standin", progress=False)
    assert checkpoint_identity("standin") == checkpoint_identity(str(models_dir() / "gpse_model_standin.pt"))
