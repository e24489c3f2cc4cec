"""``AlldayWalkerPolicy``: a VLM navigator (current frame + history + instruction -> several action words).

Per call the model reads one tiled image (current and past frames) and a prompt (instruction + past actions)
and writes up to ``num_future_steps`` action words (StreamVLN-style); the policy executes them one per ``act``
and calls the model again when they are used up or it wrote ``stop``. With a router and an expert activator
(TuKA) it selects the (scene, environment) experts from visual features of the episode's first frame.
"""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.policy import Policy
from agents.core.types import NavAction, Observation
from agents.vln.actions import format_actions, parse_with_fallback, split_goal
from agents.vln.configuration_vln import ROUTING_SOURCES, VLNAgentConfig
from agents.vln.processor_vln import VLNProcessor, build_prompt, check_instruction
from agents.vln.router import ExpertActivator, ExpertRouter, RoutingError

log = logging.getLogger(__name__)
VLM_SUBDIR = "vlm"


class _ReachedProjector(Exception):
    """Raised by the hook that captures vision-tower features, to skip the rest of the image path."""


def image_features(model: Any, pixel_values: Any, source: str = "projector", family: str = "paligemma") -> Any:
    """Mean-pooled vision features (B, D) of ``pixel_values``.

    ``source="projector"``: the output of the vision tower + multimodal projector (what the language model sees);
    ``"vision_tower"``: the projector's input, captured by a hook on the family's projector module, so the
    features do not change when an adapter on the projector does (routing may then pick that adapter's expert).
    """
    import torch

    if source not in ROUTING_SOURCES:
        raise ValueError(f"routing feature source must be one of {list(ROUTING_SOURCES)}, got {source!r}")
    captured: list[Any] = []
    handle = None
    if source == "vision_tower":
        from agents.vlm.families import get_family

        suffix = get_family(family).projector_module
        mods = [m for n, m in model.named_modules() if suffix and (n == suffix or n.endswith("." + suffix))]
        if len(mods) != 1:
            raise ValueError(f"cannot find the {family} projector {suffix!r} in the model ({len(mods)} matches)")

        def stop_at_projector(mod: Any, args: tuple[Any, ...]) -> None:
            captured.append(args[0])
            raise _ReachedProjector  # the projector (and any adapter on it) never runs

        handle = mods[0].register_forward_pre_hook(stop_at_projector)
    try:
        with torch.no_grad():
            out = model.get_image_features(pixel_values=pixel_values.to(model.device, model.dtype))
    except _ReachedProjector:
        pass
    finally:
        if handle is not None:
            handle.remove()
    if source == "vision_tower":
        if not captured:
            raise ValueError(f"the {family} projector never ran: no vision-tower features")
        out = captured[0]
        if out.dim() != 3:
            raise ValueError(f"vision-tower routing needs per-image features (B, tokens, D), got {tuple(out.shape)}")
    elif not isinstance(out, torch.Tensor):
        pooled = getattr(out, "pooler_output", None)
        out = pooled if isinstance(pooled, torch.Tensor) else out.last_hidden_state
    if out.dim() == 3:
        out = out.mean(1)
    return out.float().cpu()


class AlldayWalkerPolicy(Policy):
    """The AlldayWalker agent on an ``agents.vlm`` bundle (``model``, ``processor``, ``family``, ``image_size``)."""

    name = "alldaywalker"

    def __init__(self, bundle: Any, config: VLNAgentConfig | None = None, router: ExpertRouter | None = None,
                 activator: ExpertActivator | None = None) -> None:
        self.bundle = bundle
        self.config = config or VLNAgentConfig()
        if (router is None) != (activator is None):
            raise ValueError("router and activator must be given together (routing needs both)")
        if router is not None and not isinstance(router, ExpertRouter):
            raise TypeError(f"router must have route(features) -> (scene, env), got {type(router).__name__}")
        if activator is not None and not callable(activator):
            raise TypeError(f"activator must be callable(scene, env), got {type(activator).__name__}")
        self.router, self.activator = router, activator
        self.processor = VLNProcessor(bundle.processor, bundle.family, bundle.image_size, self.config)
        tok = self.processor.tokenizer
        words = ("ahead: " if self.config.goal_prefix else "") + " ".join(["forward"] * self.config.num_future_steps)
        self.max_new_tokens = len(tok(words, add_special_tokens=False)["input_ids"]) + 2
        self.stats = {"calls": 0, "parse_failures": 0, "routing_failures": 0}
        self.reset()

    # ------------------------------------------------------------------------------------------------ state
    def reset(self) -> None:
        self._frames: deque[np.ndarray] = deque(maxlen=1 + self.config.num_history)
        self._prev: list[NavAction] = []
        self._queue: deque[NavAction] = deque()
        self._instruction: str | None = None
        self._calls = 0
        self.route: tuple[int | None, int | None] | None = None
        self.routing_status = "off" if self.router is None else "pending"
        self.last_answer = ""
        self.last_goal: str | None = None

    @property
    def model(self) -> Any:
        return self.bundle.model

    def diagnostics(self) -> dict[str, Any]:
        """Routing state and counters (what a node publishes on /diagnostics)."""
        return {"route": self.route, "routing": self.routing_status, "last_answer": self.last_answer,
                **({"goal": self.last_goal} if self.config.goal_prefix else {}), **self.stats}

    # ------------------------------------------------------------------------------------------------ acting
    def act(self, observation: Observation) -> NavAction:
        instruction = check_instruction(observation.instruction)
        if self._instruction is not None and instruction != self._instruction:
            self.reset()  # a new instruction is a new episode (robots without an episode status)
        self._instruction = instruction
        self._frames.appendleft(observation.rgb)
        if not self._queue:
            if self.router is not None and (self._calls == 0 or (self.config.route_every
                                                                 and self._calls % self.config.route_every == 0)):
                self._route([observation.rgb])
            actions, _ = self.predict([list(self._frames)], [instruction], [self._prev])[0]
            self._calls += 1
            n = self.config.execute_steps or len(actions)
            self._queue.extend(actions[:n])
        action = self._queue.popleft()
        self._prev.append(action)
        if action == NavAction.STOP:
            self._queue.clear()
        return action

    def override(self, action: int | NavAction) -> None:
        """The action actually executed differed from the last one returned (a teacher or safety override):
        record it as the past action and drop the remaining plan, so the next ``act`` asks the model again."""
        act = NavAction.parse(action)
        if self._prev and self._prev[-1] != act:
            self._prev[-1] = act
            self._queue.clear()

    def generate(self, images: list[Any], prompts: list[str]) -> list[str]:
        """Greedy answers (decoded text) to already-tiled images and built prompts, in eval mode without gradients
        (the model's train/eval mode is restored)."""
        import torch

        inputs = self.processor.generation_inputs(images, prompts, self.bundle)
        model = self.model
        inputs = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        if was_training:
            model.train()
        return self.processor.tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    def predict(self, frames: list[list[np.ndarray]], instructions: list[str], prev_actions: list[list[int]]
                ) -> list[tuple[list[NavAction], bool]]:
        """Batched model call: for each sample (frames newest first, instruction, past actions) the parsed
        actions and whether the answer parsed strictly."""
        images = [self.processor.image(f) for f in frames]
        prompts = [build_prompt(i, p, self.config) for i, p in zip(instructions, prev_actions)]
        texts = self.generate(images, prompts)
        results = []
        for t in texts:
            goal = None
            if self.config.goal_prefix:
                goal, t = split_goal(t)
            actions, ok = parse_with_fallback(t, self.config.num_future_steps, self.config.fallback_action)
            ok = ok and (goal is not None or not self.config.goal_prefix)
            self.last_goal = goal
            self.stats["calls"] += 1
            self.stats["parse_failures"] += int(not ok)
            results.append((actions, ok))
        self.last_answer = texts[-1]
        return results

    # ----------------------------------------------------------------------------------------------- routing
    def features(self, frames: list[np.ndarray]) -> Any:
        """Routing features (B, D) of single frames."""
        return image_features(self.model, self.processor.pixel_values(frames), self.config.routing_features,
                              self.bundle.family)

    def _route(self, frames: list[np.ndarray]) -> None:
        try:
            scene, env = self.router.route(self.features(frames))
            self.activator(scene, env)
            self.route, self.routing_status = (scene, env), "routed"
        except (RoutingError, ValueError, TypeError, IndexError) as exc:
            self.stats["routing_failures"] += 1
            if not self.config.routing_fallback:
                raise RoutingError(f"expert routing failed: {exc}") from exc
            log.warning("routing failed (%s): acting with the shared knowledge only", exc)
            self.activator(None, None)
            self.route, self.routing_status = (None, None), f"fallback: shared knowledge only ({exc})"

    # ----------------------------------------------------------------------------------------- checkpoints
    def save_pretrained(self, path: str | Path, experts: Any = None, prototypes: Any = None) -> None:
        """Write ``vln_config.json``, the VLM (``vlm/``) and, for TuKA, the expert bank and prototypes."""
        path = Path(path)
        (path / VLM_SUBDIR).mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(path / VLM_SUBDIR))
        self.bundle.processor.save_pretrained(str(path / VLM_SUBDIR))
        self.config.save(path)
        if experts is not None:
            experts.save(path)
        if prototypes is not None:
            prototypes.save(path)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu", config: VLNAgentConfig | None = None,
                        **kwargs: Any) -> "AlldayWalkerPolicy":
        """Load a saved navigator; with TuKA files it routes through its own prototype table."""
        from agents.vlm.bundle import load_vlm
        from agents.vln.experts import EXPERTS_NAME, TuckerExpertBank
        from agents.vln.router import PROTOTYPES_NAME, PrototypeTable

        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint directory {path} does not exist")
        cfg = config or VLNAgentConfig.load(path)
        try:
            bundle = load_vlm(path / VLM_SUBDIR, device=device)
        except Exception as exc:  # noqa: BLE001 - safetensors/transformers raise many types for a corrupt file
            raise ValueError(f"corrupt or incomplete navigator checkpoint {path}: {type(exc).__name__}: {exc}") from exc
        router = activator = None
        if (path / EXPERTS_NAME).is_file():
            activator = TuckerExpertBank.load(path)
            activator.attach(bundle.model)
            router = PrototypeTable.load(path) if (path / PROTOTYPES_NAME).is_file() else _NoPrototypes()
            if isinstance(router, PrototypeTable) and (router.num_experts[0] > activator.num_scenes or
                                                       router.num_experts[1] > activator.num_envs):
                raise ValueError(f"corrupt navigator checkpoint {path}: its prototypes route to {router.num_experts} "
                                 f"(scene, environment) experts, its expert bank has {activator.num_scenes} x "
                                 f"{activator.num_envs}")
        return cls(bundle, cfg, router=router, activator=activator)


class _NoPrototypes:
    """A router for a checkpoint saved without prototypes: routing always fails (clear error or fallback)."""

    def route(self, features: Any) -> tuple[int, int]:
        raise RoutingError("the checkpoint has TuKA experts but no routing prototypes")


__all__ = ["AlldayWalkerPolicy", "image_features", "format_actions"]
