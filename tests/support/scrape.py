"""One scrape for every test: GET a URL as Prometheus would, and read the answer.

Plain `http.client`, so a refusal (401, 429, 503) comes back as a status to assert on, not
an exception, and nothing is followed or retried behind the test's back. The body is
un-gzipped when the server compressed it; `samples()` parses it with prometheus_client's
parser for the content type the server answered with.
"""

from __future__ import annotations

import gzip
import http.client
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPENMETRICS = "application/openmetrics-text;version=1.0.0"


@dataclass(frozen=True)
class Scraped:
    status: int
    content_type: str
    body: bytes  # un-gzipped
    content_encoding: str = ""  # as sent: "gzip" where the body came gzipped

    @property
    def text(self) -> str:
        return self.body.decode()

    def samples(self) -> dict[str, list[Any]]:
        """Sample name -> its samples (histograms as _bucket/_sum/_count)."""
        if self.content_type.startswith("application/openmetrics-text"):
            from prometheus_client.openmetrics.parser import text_string_to_metric_families
        else:
            from prometheus_client.parser import text_string_to_metric_families
        out: dict[str, list[Any]] = {}
        for fam in text_string_to_metric_families(self.text):
            for s in fam.samples:
                out.setdefault(s.name, []).append(s)
        return out

    def names(self) -> set[str]:
        return set(self.samples())


def scrape(url: str, accept: str = "", encoding: str = "",
           headers: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> Scraped:
    """GET `url` (http://host:port/path?query) with an `Accept` and `Accept-Encoding`."""
    parts = urllib.parse.urlsplit(url)
    sent = dict(headers or {})
    if accept:
        sent["Accept"] = accept
    if encoding:
        sent["Accept-Encoding"] = encoding
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                      timeout=timeout_s)
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     headers=sent)
        r = conn.getresponse()
        body = r.read()
        if r.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return Scraped(r.status, r.getheader("Content-Type", ""), body,
                       r.getheader("Content-Encoding", ""))
    finally:
        conn.close()
