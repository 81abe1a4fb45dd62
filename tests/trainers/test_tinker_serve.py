"""The Tinker serve loop's answers that need no model: which sampler a sample request gets."""

from __future__ import annotations

from types import SimpleNamespace

from trainers.tinker.serve import Session, answer


class FakeModel:
    """What `answer` touches before the model computes anything."""

    def __init__(self) -> None:
        self.samplers: dict[str, object] = {}
        self.frozen: list[tuple[str, str]] = []

    def freeze_saved(self, sampler_id, path) -> None:
        self.frozen.append((sampler_id, str(path)))
        self.samplers[sampler_id] = object()

    def sample(self, prompt, n, params, sampler_id):
        return []


def session(**kwargs) -> Session:
    return Session(
        model=FakeModel(),
        model_id="rs-run-7",
        sink=SimpleNamespace(emit=lambda event: None),
        checkpoints_dir=None,
        **kwargs,
    )


def sample(sampler_id: str) -> dict:
    return {"kind": "sample", "body": {"prompt": [1, 2], "num_samples": 0, "sampler_id": sampler_id}}


def test_a_path_the_client_never_saved_is_refused_not_sampled_with_the_current_weights():
    answered = answer(session(), sample("tinker://rs-run-7/sampler_weights/never"))
    assert answered["category"] == "user" and "No weights saved at tinker://rs-run-7" in answered["error"]


def test_a_saved_state_is_loaded_from_its_directory_to_be_sampled():
    served = session()
    served.checkpoint_paths["tinker://rs-run-7/weights/s1"] = "/runs/7/tinker/weights/s1"
    assert "result" in answer(served, sample("tinker://rs-run-7/weights/s1"))
    assert "result" in answer(served, sample("tinker://rs-run-7/weights/s1"))
    assert served.model.frozen == [("tinker://rs-run-7/weights/s1", "/runs/7/tinker/weights/s1")]


def test_a_sampling_client_takes_no_training_request():
    answered = answer(session(sampling_only=True), {"kind": "optim_step", "body": {}})
    assert answered["category"] == "user" and "is a sampling client" in answered["error"]
