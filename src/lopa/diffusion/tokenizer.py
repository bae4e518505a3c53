"""Byte-level tokenizer: ids 0-255 are bytes, then <mask>, <eos>.

Bytes need no training and no vocabulary file, and they can spell any text, so the
shipped model has no out-of-vocabulary case; the JSON file only records the special ids.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = {"<mask>": 256, "<eos>": 257}


class ByteTokenizer:
    def __init__(self, mask_token_id: int = 256, eos_token_id: int = 257):
        self.mask_token_id = mask_token_id
        self.eos_token_id = eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps({"type": "byte", "specials": SPECIALS}, indent=1))

    @classmethod
    def load(cls, path: Path) -> ByteTokenizer:
        sp = json.loads(Path(path).read_text())["specials"]
        return cls(sp["<mask>"], sp["<eos>"])
