"""A local pipeline folder that ships its own model code (the kit's CAM++ pipeline and its
campp_embedding.py) loads through load_diarization_pipeline alone: no sys.path, no PYTHONPATH."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest


def _embedding_class(pipeline):
    model = getattr(pipeline, "_embedding", None)
    model = getattr(model, "model_", model)  # 3.x and 4.x wrap the model in an inference object
    return type(model)


@pytest.mark.parametrize("given", ["folder", "config.yaml"])
def test_a_folder_s_own_embedding_module_is_imported_from_it(tmp_path, given):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline
    from speaker_asr.testing.kit import folder_module_pipeline

    module = f"folder_embedding_{given.replace('.', '_')}"
    folder = folder_module_pipeline(tmp_path / "pipeline", module=module, cls="FolderEmbedding")
    assert importlib.util.find_spec(module) is None  # nothing else provides it
    pipeline = load_diarization_pipeline(str(folder if given == "folder" else folder / "config.yaml"), None)
    assert _embedding_class(pipeline).__name__ == "FolderEmbedding"
    assert sys.modules[module].__file__ == str((folder / f"{module}.py").resolve())


def test_a_folder_module_never_shadows_an_installed_one(tmp_path):
    from speaker_asr.diarization.pipeline import use_folder_modules

    (tmp_path / "textwrap.py").write_text("raise ImportError('the folder shadowed the standard library')\n")
    (tmp_path / "only_in_this_folder.py").write_text("ANSWER = 42\n")
    use_folder_modules(tmp_path)
    use_folder_modules(tmp_path)  # idempotent: one finder per folder
    sys.modules.pop("textwrap", None)
    assert importlib.import_module("textwrap").__file__ != str(tmp_path / "textwrap.py")
    assert importlib.import_module("only_in_this_folder").ANSWER == 42
    assert sum(getattr(f, "folder", None) == tmp_path.resolve() for f in sys.meta_path) == 1


def test_without_the_module_the_load_names_it(tmp_path):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline
    from speaker_asr.testing.kit import folder_module_pipeline

    folder = folder_module_pipeline(tmp_path / "pipeline", module="folder_embedding_gone", cls="Gone")
    (folder / "folder_embedding_gone.py").unlink()
    with pytest.raises(RuntimeError, match="folder_embedding_gone"):
        load_diarization_pipeline(str(folder), None)
