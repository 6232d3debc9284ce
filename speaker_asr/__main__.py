"""``python -m speaker_asr`` = the ``speaker-asr`` command (:mod:`speaker_asr.cli`)."""

from speaker_asr.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
