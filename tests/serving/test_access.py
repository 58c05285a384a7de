"""Who may call the service: a read-only key (searches and reads, never writes), browsers of the origins named by
``--cors-origin`` (preflight answered, other origins not allowed), and HTTPS with ``--ssl-certfile`` (a real server,
reached by the client trusting its certificate; plain HTTP refused)."""

from __future__ import annotations

import subprocess

import pytest

from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app
from semiret.serving.client import Client

from helpers import LocalClient, TINY_DOCS

WRITE = {"X-API-Key": "admin"}
READ = {"X-API-Key": "reader"}
DOCUMENT = {"documents": [{"_id": "x", "text": "statins"}]}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    path = tmp_path_factory.mktemp("access") / "docs"
    BM25Retriever.build(TINY_DOCS, path)
    return path


def test_a_read_only_key_reads_and_never_writes(index):
    settings = ServeSettings({"docs": str(index)}, api_key="admin", read_api_key="reader", host="0.0.0.0",
                             write_process=False)
    with LocalClient(create_app(settings)) as client:
        assert client.post("/indexes/docs/search", json={"queries": ["cats"]}, headers=READ).status_code == 200
        assert client.get("/indexes/docs", headers=READ).status_code == 200
        refused = client.put("/indexes/docs/documents", json=DOCUMENT, headers=READ)
        assert refused.status_code == 403 and "only reads" in refused.text
        assert client.post("/indexes/docs/documents/delete", json={"ids": ["d1"]}, headers=READ).status_code == 403
        assert client.post("/indexes/docs/search", json={"queries": ["cats"]}).status_code == 401
        assert client.post("/indexes/docs/search", json={"queries": ["cats"]},
                           headers={"X-API-Key": "other"}).status_code == 401
        assert client.put("/indexes/docs/documents", json=DOCUMENT, headers=WRITE).status_code == 200
        assert client.post("/indexes/docs/documents/delete", json={"ids": ["x"]}, headers={
            "Authorization": "Bearer admin"}).status_code == 200
    reader_only = ServeSettings({"docs": str(index)}, read_api_key="reader", host="0.0.0.0", write_process=False)
    with LocalClient(create_app(reader_only)) as client:  # off loopback with only a read key: a searching server
        assert client.post("/indexes/docs/search", json={"queries": ["cats"]}, headers=READ).status_code == 200
        assert client.post("/indexes/docs/search", json={"queries": ["cats"]}).status_code == 401
        assert client.put("/indexes/docs/documents", json=DOCUMENT, headers=READ).status_code == 403
    for api_key, read_api_key in (("same", "same"), ("admin", " ")):
        with pytest.raises(SemiretError, match="read-only API key is empty, or the same"):
            ServeSettings({"docs": str(index)}, api_key=api_key, read_api_key=read_api_key)



def test_a_request_no_key_admits_is_refused_before_its_body_is_read(index, monkeypatch):
    """Its JSON was scanned first (megabytes of long digit runs, or a NaN, took the event loop for seconds before
    the 401), and a bad body answered 422 to a client without a key."""
    import semiret.serving.app as app_module

    scanned = []
    check_json_text = app_module.check_json_text
    monkeypatch.setattr(app_module, "check_json_text", lambda *args: scanned.append(1) or check_json_text(*args))
    settings = ServeSettings({"docs": str(index)}, api_key="admin", read_api_key="reader", host="0.0.0.0",
                             write_process=False)
    body = '{"queries": ["cats"], "k": NaN}'
    with LocalClient(create_app(settings)) as client:
        for headers in ({}, {"X-API-Key": "other"}):
            answer = client.post("/indexes/docs/search", content=body, headers={"content-type": "application/json",
                                                                              **headers})
            assert answer.status_code == 401 and not scanned
        answer = client.post("/indexes/docs/search", content=body, headers={"content-type": "application/json",
                                                                          **READ})
        assert answer.status_code == 422 and "NaN is not a finite number" in answer.text and scanned
    assert app_module.LARGE_NUMBER.search("x" + "9" * 300) and not app_module.LARGE_NUMBER.search("9" * 299 + " 1")
    with LocalClient(create_app(settings)) as client:  # probes take no key, whatever header a client sends
        for probe in ("/healthz", "/readyz"):
            assert client.get(probe, headers={"content-type": "application/json"}).status_code == 200


def test_reads_without_a_key_answer_loopback_names_only(index):
    """On loopback, reads without a key answer requests for localhost, 127.0.0.1 or [::1] (any port), not those
    naming another host: a web page whose name the browser was made to resolve to 127.0.0.1 (DNS rebinding) read
    every document. A read-only key given there is wanted by every read (it was ignored: any key, or none, read)."""
    from starlette.testclient import TestClient

    keyless = create_app(ServeSettings({"docs": str(index)}, api_key="admin", write_process=False))
    for base in ("http://localhost:8000", "http://127.0.0.1", "http://[::1]:9000", "http://127.0.0.2"):
        with TestClient(keyless, base_url=base) as client:
            assert client.get("/indexes/docs/documents/d1").status_code == 200, base
    with TestClient(keyless, base_url="http://rebind.attacker.example:8000") as client:
        refused = client.get("/indexes/docs/documents/d1")
        assert refused.status_code == 403 and "loopback names only" in refused.text and "d1" not in refused.text
        assert client.get("/indexes/docs/documents/d1", headers=WRITE).status_code == 200  # a key: any name
    keyed = ServeSettings({"docs": str(index)}, api_key="admin", read_api_key="reader", write_process=False)
    with LocalClient(create_app(keyed)) as client:
        assert client.get("/indexes/docs/documents/d1").status_code == 401
        assert client.get("/indexes/docs/documents/d1", headers={"X-API-Key": "wrong"}).status_code == 401
        assert client.get("/indexes/docs/documents/d1", headers=READ).status_code == 200


def test_keys_are_taken_as_headers_can_send_them(index):
    """A key read from a secret file ends in a newline, which no header can send (every request was a 401): it is
    stripped; a key no header carries alike from every client (non-ASCII) is refused when the server starts."""
    settings = ServeSettings({"docs": str(index)}, api_key="admin\n", read_api_key=" reader ", write_process=False)
    with LocalClient(create_app(settings)) as client:
        assert client.put("/indexes/docs/documents", json=DOCUMENT, headers=WRITE).status_code == 200
        assert client.get("/indexes/docs/documents/x", headers=READ).status_code == 200
    with pytest.raises(SemiretError, match="API key holds a character other than printable ASCII"):
        ServeSettings({"docs": str(index)}, api_key="clé")


def test_browsers_of_the_named_origins_may_call(index):
    settings = ServeSettings({"docs": str(index)}, write_process=False, cors_origins=["https://app.example.com"])
    with LocalClient(create_app(settings)) as client:
        preflight = client.options("/indexes/docs/search", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, x-api-key"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
        answer = client.post("/indexes/docs/search", json={"queries": ["cats"]},
                             headers={"Origin": "https://app.example.com"})
        assert answer.headers["access-control-allow-origin"] == "https://app.example.com"
        other = client.post("/indexes/docs/search", json={"queries": ["cats"]},
                            headers={"Origin": "https://evil.example.com"})
        assert "access-control-allow-origin" not in other.headers
    slashed = ServeSettings({"docs": str(index)}, write_process=False, cors_origins=["https://app.example.com/"])
    with LocalClient(create_app(slashed)) as client:  # as copied from an address bar: it matched no browser's origin
        answer = client.post("/indexes/docs/search", json={"queries": ["cats"]},
                             headers={"Origin": "https://app.example.com"})
        assert answer.headers["access-control-allow-origin"] == "https://app.example.com"
    with LocalClient(create_app(ServeSettings({"docs": str(index)}, write_process=False))) as client:
        plain = client.post("/indexes/docs/search", json={"queries": ["cats"]},
                            headers={"Origin": "https://app.example.com"})
        assert "access-control-allow-origin" not in plain.headers  # none named: no browser page may call


def test_https_with_a_certificate(index, tmp_path):
    import http.client

    from semiret.serving.process import ServerProcess

    certificate, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(certificate)],
                   check=True, capture_output=True)
    arguments = ["--ssl-certfile", str(certificate), "--ssl-keyfile", str(key)]
    with ServerProcess({"docs": index}, api_key="admin", extra_args=arguments) as server:
        assert server.url.startswith("https://")
        with Client(server.url, api_key="admin", ssl_context=server.ssl_context) as client:
            assert [h.id for h in client.search("docs", "cats", k=2)] == [
                h.id for h in BM25Retriever.open(index).search("cats", k=2)]
        with Client(server.url) as untrusted:  # the system's authorities do not know this certificate
            with pytest.raises(OSError):
                untrusted.search("docs", "cats")
        plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
        with pytest.raises((http.client.HTTPException, OSError)):  # no answer over plain HTTP
            plain.request("GET", "/healthz")
            plain.getresponse()
        plain.close()
    from typer.testing import CliRunner

    from semiret.cli import app

    half = CliRunner().invoke(app, ["serve", "--index", str(index), "--ssl-certfile", str(certificate)])
    assert half.exit_code == 2 and "needs both --ssl-certfile and --ssl-keyfile" in half.output
    # a key of another pair, and an encrypted key without its password, are refused naming both files (uvicorn
    # said "[SSL] PEM lib" once it had announced the server, or asked for the password on the terminal)
    other, encrypted = tmp_path / "other.pem", tmp_path / "encrypted.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(other), "2048"], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:secret", "-out", str(encrypted)],
                   check=True, capture_output=True)
    for wrong in (other, encrypted):
        refused = CliRunner().invoke(app, ["serve", "--index", str(index), "--ssl-certfile", str(certificate),
                                           "--ssl-keyfile", str(wrong)])
        assert refused.exit_code == 2 and "do not load as a certificate and its private key" in refused.output
        assert wrong.name in refused.output and "serving" not in refused.output
    arguments = ["--ssl-certfile", str(certificate), "--ssl-keyfile", str(encrypted), "--ssl-keyfile-password", "secret"]
    with ServerProcess({"docs": index}, api_key="admin", extra_args=arguments) as server:
        with Client(server.url, api_key="admin", ssl_context=server.ssl_context) as client:
            assert client.search("docs", "cats", k=1)
