"""Open a GGUF file: metadata as plain Python values, tensors as raw uint8 memory-mapped views.

INTERIM version (lead): the gguf/quant owner replaces the body with a hardened reader that
checks the header itself (counts/lengths bounded by the file size, offsets inside the file)
before handing bytes to gguf.GGUFReader. The interface below is the contract others use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

from orcd.errors import GGUFError


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]  # torch order (outermost first): a [out, in] weight is (out, in); GGUF ne reversed
    data: np.ndarray  # raw bytes, uint8, shape (shape[0] * ... * shape[-2], row_bytes) or flat; memory-mapped

    @property
    def n_bytes(self) -> int:
        return int(self.data.nbytes)


@dataclass
class GGUFFile:
    path: Path
    file_size: int
    version: int
    metadata: dict[str, Any]  # key -> int | float | bool | str | list of those
    tensors: dict[str, GGUFTensor]

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path.name}: missing metadata key general.architecture")
        return arch


def open_gguf(path: str | Path) -> GGUFFile:
    path = Path(path)
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, OSError, IndexError) as err:
        raise GGUFError(f"{path.name}: not a readable GGUF file ({err})") from err
    metadata = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        raw = np.asarray(t.data).view(np.uint8)
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        tensors[t.name] = GGUFTensor(t.name, GGMLQuantizationType(t.tensor_type), shape, raw.reshape(rows, -1))
    version = int(reader.fields["GGUF.version"].contents())
    return GGUFFile(path, path.stat().st_size, version, metadata, tensors)
