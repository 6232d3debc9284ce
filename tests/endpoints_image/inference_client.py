"""Call a local endpoint with huggingface_hub's InferenceClient, in a process of its own.

    python inference_client.py URL CONTENT_TYPE AUDIO_FILE [EXTRA_BODY_JSON]

Prints the typed output as JSON: ``text``, ``chunks`` (the output's chunk objects, with every
field the endpoint sent) and ``speakers``. A process of its own because the test suite sets
HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE (nothing may reach the hub), which huggingface_hub applies
to every URL, loopback included; this process runs without them and only ever calls the URL it is given (127.0.0.1).

The client gets a Content-Type header: it sends the file without one, which the Inference
Endpoints toolkit refuses ("Content type None not supported"); with ``extra_body`` it sends base64
JSON under that same header, which the handler reads as the JSON it is.
"""

from __future__ import annotations

import json
import sys

from huggingface_hub import InferenceClient


def main(url: str, content_type: str, path: str, extra_body: str = "") -> None:
    if not url.startswith("http://127.0.0.1:"):
        raise SystemExit(f"only a loopback endpoint is called here, not {url}")
    client = InferenceClient(model=url, headers={"Content-Type": content_type})
    with open(path, "rb") as f:
        audio = f.read()
    out = client.automatic_speech_recognition(audio, extra_body=json.loads(extra_body) if extra_body else None)
    print(json.dumps({"text": out.text, "chunks": [dict(c) for c in out.chunks or []],
                      "speakers": out.get("speakers")}))


if __name__ == "__main__":
    main(*sys.argv[1:])
