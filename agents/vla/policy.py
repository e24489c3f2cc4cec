"""``VLAPolicy``: VLM2VLA's inference loop around a VLM (agents.core Policy).

Per episode: generate the subtask list once from the first image (kept fixed); for each subtask generate the
motion plan, then the action chunk; execute the chunk one control step per :meth:`VLAPolicy.act` call (a queue);
when it is used up, ask the verifier (before/after observations, current/next subtask) to advance or retry
(with ``replan_steps`` k > 0 the subtask is also planned again from the current image every k steps of a chunk).
Malformed generations are resampled up to ``max_tries`` times (counted in :attr:`VLAPolicy.stats`), then
:class:`VLAGenerationError`. Actions are end-effector displacements in metres + the simulator gripper command
(-1 open, +1 close), phase = the current subtask; "done" after the last subtask.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.policy import Policy
from agents.core.types import Observation
from agents.core.verifier import VERIFIERS, Verdict, Verifier
from agents.vla import prompts
from agents.vla.action_language import MalformedActionError, check_motion, parse_subtasks, state_to_command
from agents.vla.codecs import ActionCodec, make_codec
from agents.vla.config import VLAPolicyConfig
from agents.vlm import GenerationSettings, VLMBundle, check_image, generate

log = logging.getLogger(__name__)


_LABELS = {"subtasks": "subtasks", "motion": "motion plan", "chunk": "action chunk"}


class VLAGenerationError(RuntimeError):
    """The model produced no well-formed output for one level within ``max_tries`` generations."""


@dataclass(frozen=True)
class VLAAction:
    """One control step: ``delta`` [dx, dy, dz] metres (base frame), ``gripper`` -1 open .. +1 close, ``phase``."""

    delta: tuple[float, float, float]
    gripper: float
    phase: str = ""
    done: bool = False

    def as_array(self) -> np.ndarray:
        return np.asarray([*self.delta, self.gripper], dtype=np.float32)


@dataclass
class VLAStats:
    """Counters over the policy's lifetime (:meth:`VLAPolicy.reset_stats` clears them)."""

    generations: int = 0
    malformed: int = 0
    failures: int = 0
    chunks: int = 0
    steps: int = 0
    subtask_retries: int = 0
    replans: int = 0
    generation_s: list[float] = field(default_factory=list)

    @property
    def malformed_rate(self) -> float:
        return self.malformed / self.generations if self.generations else 0.0

    def as_dict(self) -> dict[str, float]:
        g = self.generation_s
        return {"generations": self.generations, "malformed": self.malformed, "malformed_rate": self.malformed_rate,
                "failures": self.failures, "chunks": self.chunks, "steps": self.steps,
                "subtask_retries": self.subtask_retries, "replans": self.replans,
                "median_generation_s": float(np.median(g)) if g else float("nan")}


def expand_chunk(chunk_cm: np.ndarray, gripper_state: float, max_step_m: float,
                 gripper_steps: int) -> tuple[list[tuple[np.ndarray, float]], float]:
    """Control steps of a decoded chunk (K x 4: ``[dx, dy, dz]`` cm, gripper state 1 open / 0 closed).

    Each element is split into equal steps of at most ``max_step_m`` per axis; an element that changes the gripper
    lasts at least ``gripper_steps`` steps. Returns ``([(delta_m, gripper_command), ...], gripper state after)``.
    """
    steps: list[tuple[np.ndarray, float]] = []
    g_prev = gripper_state
    for dx, dy, dz, g in np.asarray(chunk_cm, dtype=np.float64).reshape(-1, 4):
        d = np.array([dx, dy, dz], dtype=np.float64) / 100.0
        n = max(1, math.ceil(float(np.abs(d).max()) / max_step_m - 1e-9))
        if (g >= 0.5) != (g_prev >= 0.5):
            n = max(n, gripper_steps)
        cmd = state_to_command(g)
        steps += [(d / n, cmd) for _ in range(n)]
        g_prev = g
    return steps, float(g_prev >= 0.5)


class VLAPolicy(Policy):
    """VLM2VLA policy over a :class:`~agents.vlm.VLMBundle` (see the module docstring)."""

    name = "vlm2vla"

    def __init__(self, bundle: VLMBundle, config: VLAPolicyConfig | None = None, codec: ActionCodec | None = None,
                 verifier: Verifier | None = None) -> None:
        if not isinstance(bundle, VLMBundle):
            raise TypeError(f"bundle must be a VLMBundle, got {type(bundle).__name__}")
        self.bundle = bundle
        self.config = config or VLAPolicyConfig()
        cfg = self.config
        self.codec = codec or make_codec(cfg.codec, bundle.tokenizer, cfg.limits, **cfg.codec_state)
        if self.codec.name != cfg.codec:
            raise ValueError(f"codec {self.codec.name!r} does not match config.codec {cfg.codec!r}")
        self.verifier = verifier if verifier is not None else VERIFIERS.get(cfg.verifier)(bundle=bundle)
        if not isinstance(self.verifier, Verifier):
            raise TypeError(f"verifier must implement verify(before, after, subtask, next_subtask), "
                            f"got {type(self.verifier).__name__}")
        self.constrainer = None
        if cfg.constrained:
            from agents.vla.constrained import Constrainer

            self.constrainer = Constrainer(bundle.tokenizer, self.codec)
        self.image_size = cfg.image_size or bundle.image_size
        self.stats = VLAStats()
        self.reset()

    # ------------------------------------------------------------------------------------------ state
    def reset(self) -> None:
        self.subtasks: list[str] | None = None
        self.index = 0
        self.retries = 0
        self.queue: deque[tuple[np.ndarray, float]] = deque()
        self.gripper_state = 1.0  # open
        self.motion = ""
        self.last_chunk: np.ndarray | None = None
        self._chunk_start: dict[str, Any] | None = None
        self._instruction: str | None = None
        self._calls = 0
        self._since_plan = 0  # control steps executed from the current chunk
        self._replans = 0  # re-plans of the current subtask (replan_steps)
        self._executed_state = 1.0  # the gripper state the last executed step left (1 open)
        self._since_grip_change = 1 << 30  # executed steps since the gripper command last changed

    def reset_stats(self) -> None:
        self.stats = VLAStats()

    @property
    def phase(self) -> str:
        if not self.codec.hierarchical:
            return "act"
        if self.subtasks is None:
            return ""
        return self.subtasks[self.index] if self.index < len(self.subtasks) else "done"

    # ------------------------------------------------------------------------------------------ inputs
    def _observation(self, observation: Any) -> dict[str, Any]:
        if isinstance(observation, Observation):
            return {"rgb": observation.rgb, "instruction": observation.instruction, **observation.extras}
        if isinstance(observation, Mapping):
            if "rgb" not in observation:
                raise ValueError("observation must have an 'rgb' image")
            return dict(observation)
        raise TypeError(f"observation must be a mapping with 'rgb' or an agents.core Observation, "
                        f"got {type(observation).__name__}")

    def prepare_image(self, image: Any) -> np.ndarray:
        """Check the camera image (HxWx3 uint8); wrong sizes are a ValueError unless ``resize_images``."""
        img = check_image(image, name="observation['rgb']")
        s = self.image_size
        if s is not None and img.shape[:2] != (s, s):
            if not self.config.resize_images:
                raise ValueError(f"observation['rgb'] must be {s}x{s} for this policy, got {img.shape[0]}x"
                                 f"{img.shape[1]} (set resize_images=True to resize)")
            from PIL import Image

            img = np.asarray(Image.fromarray(img).resize((s, s), Image.BILINEAR))
        return img

    # ------------------------------------------------------------------------------------------ generation
    def _generate_valid(self, level: str, image: np.ndarray, prompt: str, parse: Callable[[Any], Any],
                        temperature: float, max_new_tokens: int) -> Any:
        """Generate until ``parse(generation)`` succeeds (MalformedActionError -> resample), at most max_tries.
        With ``config.constrained`` each generation is grammar-constrained (``level``: subtasks / motion / chunk)."""
        cfg = self.config
        last, label = "", _LABELS[level]
        for k in range(cfg.max_tries):
            greedy = cfg.greedy_first and k == 0
            self._calls += 1
            s = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0 if greedy else temperature,
                                   top_p=cfg.top_p, seed=cfg.seed + self._calls)
            kw = {}
            if self.constrainer is not None:
                kw["prefix_allowed_tokens_fn"] = self.constrainer.constraint(level, max_new_tokens)
            gen = generate(self.bundle, [image], [prompt], s, **kw)[0]
            self.stats.generations += 1
            try:
                return parse(gen)
            except MalformedActionError as exc:
                self.stats.malformed += 1
                last = f"{exc} (text {gen.text[:60]!r})"
                log.debug("malformed %s output (try %d/%d): %s", label, k + 1, cfg.max_tries, last)
        self.stats.failures += 1
        raise VLAGenerationError(f"no well-formed {label} after {cfg.max_tries} tries; last: {last}")

    def plan_subtasks(self, image: np.ndarray, instruction: str) -> list[str]:
        cfg = self.config
        return self._generate_valid("subtasks", image, prompts.subtasks_prompt(instruction),
                                    lambda g: parse_subtasks(g.text), cfg.temperature_subtasks,
                                    cfg.max_new_tokens_subtasks)

    def plan_chunk(self, image: np.ndarray, instruction: str, subtask: str | None) -> tuple[str, np.ndarray]:
        """Motion plan (hierarchical codecs) then the decoded chunk (K x 4: cm, gripper 1 open / 0 closed)."""
        cfg = self.config
        motion = ""
        if subtask is not None:
            motion = self._generate_valid("motion", image, prompts.motion_prompt(instruction, subtask),
                                          lambda g: check_motion(g.text), cfg.temperature_motion,
                                          cfg.max_new_tokens_motion)
        chunk = self._generate_valid("chunk", image, prompts.actions_prompt(instruction, subtask, motion),
                                     lambda g: self.codec.decode(g.text, g.token_ids), cfg.temperature_actions,
                                     cfg.max_new_tokens_actions)
        if not np.isfinite(chunk).all():  # codecs never return NaN; this guards custom ones
            raise VLAGenerationError("codec returned a non-finite chunk")
        return motion, chunk

    def _enqueue(self, chunk_cm: np.ndarray) -> None:
        steps, self.gripper_state = expand_chunk(chunk_cm, self.gripper_state, self.config.max_step_m,
                                                 self.config.gripper_steps)
        self.queue.extend(steps)

    # ------------------------------------------------------------------------------------------ act
    def act(self, observation: Any, instruction: str | None = None) -> VLAAction:
        """Next end-effector step for ``observation`` (dict with ``rgb`` [+ ``instruction``, ``ee_pos``] or an
        agents.core Observation). ``instruction`` overrides the observation's; it must stay the same within an
        episode (a new one resets the policy)."""
        obs = self._observation(observation)
        text = prompts.check_instruction(instruction if instruction is not None else obs.get("instruction", ""),
                                         self.config.allow_non_english)
        obs["instruction"] = text
        if self._instruction is not None and text != self._instruction:
            log.info("new instruction: resetting the policy")
            self.reset()
        self._instruction = text
        image = self.prepare_image(obs["rgb"])
        if self.queue and self._due_replan():
            self._replan(image, text)
        if not self.queue:
            self._refill(obs, image, text)
        if not self.queue:  # all subtasks done
            return VLAAction((0.0, 0.0, 0.0), state_to_command(self.gripper_state), "done", done=True)
        delta, cmd = self.queue.popleft()
        self._since_plan += 1
        state = 1.0 if cmd < 0 else 0.0  # the gripper state this step leaves (1 open)
        self._since_grip_change = 0 if state != self._executed_state else self._since_grip_change + 1
        self._executed_state = state
        delta = self._bound(delta, obs)
        self.stats.steps += 1
        return VLAAction(tuple(float(v) for v in delta), float(cmd), self.phase)

    def _due_replan(self) -> bool:
        """Re-plan now? Never inside a gripper change's hold (``gripper_steps`` still steps while it moves)."""
        cfg = self.config
        return (self.codec.hierarchical and cfg.replan_steps > 0 and self._since_plan >= cfg.replan_steps
                and self._replans < cfg.max_replans and self._since_grip_change >= cfg.gripper_steps - 1)

    def _replan(self, image: np.ndarray, text: str) -> None:
        """Drop the rest of the chunk and plan the same subtask again from ``image`` (receding horizon)."""
        self.queue.clear()
        self.gripper_state = self._executed_state  # the dropped steps' gripper changes never happened
        self._replans += 1
        self.stats.replans += 1
        self._plan_and_enqueue(image, text)

    def _refill(self, obs: dict[str, Any], image: np.ndarray, text: str) -> None:
        hier = self.codec.hierarchical
        if hier and self.subtasks is None:
            self.subtasks = self.plan_subtasks(image, text)
            log.debug("subtasks: %s", self.subtasks)
        elif hier and self._chunk_start is not None:  # a chunk just finished: ask the verifier
            current = self.subtasks[self.index]
            nxt = self.subtasks[self.index + 1] if self.index + 1 < len(self.subtasks) else None
            verdict = Verdict(self.verifier.verify(self._chunk_start, obs, current, nxt))
            if verdict is Verdict.RETRY and self.retries < self.config.max_subtask_retries:
                self.retries += 1
                self.stats.subtask_retries += 1
            else:
                self.index += 1
                self.retries = 0
                self._replans = 0
            if self.index >= len(self.subtasks):
                self._chunk_start = None
                return
        self._chunk_start = obs
        self._plan_and_enqueue(image, text)

    def _plan_and_enqueue(self, image: np.ndarray, text: str) -> None:
        t0 = time.perf_counter()
        self.motion, chunk = self.plan_chunk(image, text, self.phase if self.codec.hierarchical else None)
        self.stats.generation_s.append(time.perf_counter() - t0)
        self.stats.chunks += 1
        self.last_chunk = chunk
        self._since_plan = 0
        self._enqueue(chunk)

    def _bound(self, delta: np.ndarray, obs: Mapping[str, Any]) -> np.ndarray:
        cfg = self.config
        d = np.clip(np.nan_to_num(delta, nan=0.0, posinf=0.0, neginf=0.0), -cfg.max_step_m, cfg.max_step_m)
        ee = obs.get("ee_pos")
        if cfg.workspace_lo is not None and ee is not None:
            ee = np.asarray(ee, dtype=np.float64).reshape(3)
            if np.isfinite(ee).all():
                d = np.clip(ee + d, cfg.workspace_lo, cfg.workspace_hi) - ee
        return np.clip(d, -cfg.max_step_m, cfg.max_step_m)

    # ------------------------------------------------------------------------------------------ checkpoints
    def save_pretrained(self, path: str | Path) -> Path:
        """Write the policy directory (see :mod:`agents.vla.checkpoint`)."""
        from agents.vla.checkpoint import save_policy

        return save_policy(self, path)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> "VLAPolicy":
        """Load a policy directory, a VLM checkpoint, or a base + ``adapter=`` (see :func:`load_policy`)."""
        from agents.vla.checkpoint import load_policy

        return load_policy(path, **kwargs)
