"""A lab that imports torch only when an experiment needs the device."""
from __future__ import annotations

from typing import Any, Dict, Optional

from .verdicts import Verdicts


class LazyLab(Verdicts):
    """Stands in for the Lab until an experiment touches torch (`--lazy` workers).

    Verdict helpers work without torch; any other attribute imports torch and
    builds the real Lab on the requested device.
    """

    def __init__(self, device: str, seed: int) -> None:
        self._device = device
        self._seed = seed
        self._code: Optional[str] = None
        self._real: Any = None

    def materialize(self) -> Any:
        if self._real is None:
            from .lab import Lab

            self._real = Lab(self._device, self._seed)
            if self._code is not None:
                self._real.begin(self._code, self._seed)
        return self._real

    def begin(self, code: str, seed: int) -> None:
        self._code, self._seed = code, seed
        if self._real is not None:
            self._real.begin(code, seed)

    def end(self) -> None:
        if self._real is not None:
            self._real.end()

    def env(self) -> Dict[str, Any]:
        return self._real.env() if self._real is not None else {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.materialize(), name)
