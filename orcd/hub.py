"""`orcd pull REPO FILE` and `hf:REPO/FILE` model specs, both through huggingface_hub's cache.

The cache (HF_HUB_CACHE, default ~/.cache/huggingface/hub), resumption of broken downloads, the
progress bar, HF_TOKEN and HF_ENDPOINT all come from huggingface_hub itself. A file already in the
cache is used without a network round trip when HF_HUB_OFFLINE=1, and as a fallback when the Hub
cannot be reached.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from orcd.errors import OrcdError

DEMO_MODEL_PATH = Path(__file__).resolve().parent / "assets" / "demo.gguf"
HF_PREFIX = "hf:"


class HubError(OrcdError):
    """A model could not be found or downloaded from the Hub, or a model spec is malformed."""


def parse_hf_spec(spec: str) -> tuple[str, str]:
    """"hf:owner/name/path/file.gguf" -> ("owner/name", "path/file.gguf")."""
    parts = spec[len(HF_PREFIX):].split("/") if spec.startswith(HF_PREFIX) else []
    if len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        raise HubError(f"bad model spec {spec!r}: expected hf:OWNER/REPO/FILE")
    return "/".join(parts[:2]), "/".join(parts[2:])


# hf_hub_download calls per file: huggingface_hub >= 2.0 continues a broken download by itself, older
# versions raise and keep the partial file, which the next call continues (tests/test_hub.py)
DOWNLOAD_ATTEMPTS = 3


def download(repo: str, filename: str, *, revision: str | None = None, cache_dir: str | None = None,
             progress: bool = True) -> Path:
    """Download (or find in the cache) one file of a model repo; returns its path in the cache."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    where = f"{repo}/{filename}" + (f"@{revision}" if revision else "")
    broken = _broken_connection_errors()
    bars_were_disabled = are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        attempts_left = DOWNLOAD_ATTEMPTS
        while True:
            try:
                return Path(hf_hub_download(repo_id=repo, filename=filename, revision=revision,
                                            cache_dir=cache_dir))
            except (HfHubHTTPError, LocalEntryNotFoundError):
                raise  # an answer from the Hub (or no Hub at all): trying again would get the same
            except broken:  # the connection broke mid-file: the next call continues the partial file
                attempts_left -= 1
                if not attempts_left:
                    raise
    except GatedRepoError as err:
        raise HubError(f"{repo} is gated: accept its terms on the Hub and set HF_TOKEN") from err
    except RepositoryNotFoundError as err:
        raise HubError(f"repository {repo} not found (or private: set HF_TOKEN)") from err
    except RevisionNotFoundError as err:
        raise HubError(f"revision {revision!r} not found in {repo}") from err
    except LocalEntryNotFoundError as err:
        raise HubError(f"{where} is not in the cache and the Hub cannot be reached") from err
    except EntryNotFoundError as err:
        raise HubError(f"file {filename!r} not found in {repo}") from err
    except HfHubHTTPError as err:
        raise HubError(f"download of {where} failed: {str(err).splitlines()[0]}") from err
    except broken as err:
        raise HubError(f"download of {where} failed: {err}") from err
    finally:
        if not progress and not bars_were_disabled:
            enable_progress_bars()


def _broken_connection_errors() -> tuple[type[BaseException], ...]:
    """What a dropped connection raises, by huggingface_hub version: OSError (requests, < 1.0; file system
    errors too), httpx.TransportError (1.x) or httpx2.TransportError (2.x)."""
    errors: list[type[BaseException]] = [OSError]
    for name in ("httpx", "httpx2"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def resolve_model_path(spec: str | None, *, progress: bool = True) -> Path:
    """A model spec -> a local GGUF path.

    None -> the bundled demo model; "hf:OWNER/REPO/FILE" -> that file in the Hugging Face cache
    (downloaded first if missing); anything else -> a local file path.
    """
    if spec is None:
        if not DEMO_MODEL_PATH.is_file():
            raise HubError(f"the bundled demo model is missing ({DEMO_MODEL_PATH})")
        return DEMO_MODEL_PATH
    if spec.startswith(HF_PREFIX):
        repo, filename = parse_hf_spec(spec)
        return download(repo, filename, progress=progress)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise HubError(f"model file not found: {spec}")
    return path
