"""A generated VQA set about simulated tabletop scenes whose ground truth is known (the VQA skill of the
VLM2VLA experiment: how much of it survives action fine-tuning).

Scenes are robosuite ``Stack`` tables (Panda at its reset pose, camera ``agentview``) with the two cubes recoloured
from :data:`PALETTE` and placed by setting their free joints: side by side, stacked (either on top) or one cube
alone (the other moved out of view). Each scene yields the questions that apply to it:

* ``count``: "how many cubes are there?" -> one / two
* ``colour``: "what colour is the cube?" (one cube) -> red / green / blue / yellow
* ``exists``: "is there a blue cube?" -> yes / no
* ``side``: "is the red cube left or right of the green cube?" -> left / right (as seen in the image)
* ``top``: "what colour is the top cube?" (stacked) -> a colour
* ``table``: "what colour is the table?" -> white / black / brown / pink (the table top is recoloured too)

With ``spatial=True`` every visible cube also gets two questions answered in the action language's own words and
numbers, the kind of spatial grounding real VLMs are pre-trained on (Qwen2.5-VL answers boxes as number lists):

* ``where``: "where is the red cube from the gripper in cm?" -> ``[dx, dy, dz]`` (robot base frame, one decimal)
* ``way``: "which way is the red cube from the gripper?" -> a motion phrase (``move forward and slightly left``)

``spatial_camera`` asks them about the same scene seen through another camera (e.g. the wrist camera a policy
acts through: the gripper at its reset pose looks down on the table), so the prior is learnt in the policy's view.

They give a tiny model trained from scratch the prior a pre-trained VLM brings to VLM2VLA: digits, brackets and
direction words are language it already speaks (:data:`SPATIAL_KINDS`; :func:`general_only` drops them, so the
retention of the general VQA skill is measured on the same questions with or without them).

The split is by scene: ``held_out`` of the scenes (and all their questions) are never trained on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from agents.core.io import NPZ_READ_ERRORS, load_npz, save_npz

log = logging.getLogger(__name__)

PALETTE: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.1, 0.1), "green": (0.1, 0.65, 0.15), "blue": (0.15, 0.25, 0.9), "yellow": (0.95, 0.85, 0.1)}
TABLE_PALETTE: dict[str, tuple[float, float, float]] = {
    "white": (0.92, 0.92, 0.9), "black": (0.12, 0.12, 0.12), "brown": (0.5, 0.32, 0.15), "pink": (0.95, 0.6, 0.75)}
LAYOUTS = ("side", "stacked", "single")
TABLE_Z = 0.81
HALF = {"cubeA": 0.02, "cubeB": 0.025}
#: the words every answer is made of (also seeds the tiny tokenizer's corpus)
ANSWER_WORDS = ("one", "two", *PALETTE, *TABLE_PALETTE, "yes", "no", "left", "right")
SPATIAL_KINDS = ("where", "way")


@dataclass(frozen=True)
class VQAItem:
    """One question about one rendered scene."""

    image: np.ndarray
    question: str
    answer: str
    kind: str
    scene: int


def _recolour(sim: object, body: str, rgb: tuple[float, float, float]) -> None:
    m = sim.model  # type: ignore[attr-defined]
    for i in range(m.ngeom):
        name = m.geom_id2name(i) or ""
        if name.startswith(f"{body}_") and name.endswith("_vis"):
            m._model.geom_matid[i] = -1
            m.geom_rgba[i] = (*rgb, 1.0)


def _recolour_table(sim: object, rgb: tuple[float, float, float]) -> None:
    m = sim.model  # type: ignore[attr-defined]
    i = m.geom_name2id("table_visual")
    m._model.geom_matid[i] = -1
    m.geom_rgba[i] = (*rgb, 1.0)


def _place(sim: object, addr: int, pos: tuple[float, float, float]) -> None:
    sim.data.qpos[addr:addr + 7] = [*pos, 1.0, 0.0, 0.0, 0.0]  # type: ignore[attr-defined]


def _scene_questions(rng: np.random.Generator, layout: str, col: dict[str, str], pos: dict[str, np.ndarray],
                     top: str | None, table: str) -> list[tuple[str, str, str]]:
    visible = [c for c in ("cubeA", "cubeB") if pos[c][2] > 0]
    qa = [("count", "how many cubes are there?", "one" if len(visible) == 1 else "two"),
          ("table", "what colour is the table?", table)]
    present = {col[c] for c in visible}
    ask = str(rng.choice(sorted(present))) if rng.random() < 0.5 else str(rng.choice(sorted(set(PALETTE) - present)))
    qa.append(("exists", f"is there a {ask} cube?", "yes" if ask in present else "no"))
    if layout == "single":
        qa.append(("colour", "what colour is the cube?", col[visible[0]]))
    elif layout == "side":
        a, b = ("cubeA", "cubeB") if rng.random() < 0.5 else ("cubeB", "cubeA")
        # agentview looks at the robot (towards -x): world -y appears on the left of the image
        qa.append(("side", f"is the {col[a]} cube left or right of the {col[b]} cube?",
                   "left" if pos[a][1] < pos[b][1] else "right"))
    else:
        assert top is not None
        qa.append(("top", "what colour is the top cube?", col[top]))
    return qa


def _spatial_questions(col: dict[str, str], pos: dict[str, np.ndarray], ee: np.ndarray) -> list[tuple[str, str, str]]:
    """The :data:`SPATIAL_KINDS` questions of each visible cube (deterministic: the general questions' random draws
    are the same with or without them)."""
    from agents.vla.action_language import format_cm, motion_plan

    qa = []
    for c in ("cubeA", "cubeB"):
        if pos[c][2] <= 0:
            continue
        d = (np.asarray(pos[c], dtype=np.float64) - ee) * 100.0
        qa.append(("where", f"where is the {col[c]} cube from the gripper in cm?",
                   "[" + ", ".join(format_cm(v) for v in d) + "]"))
        qa.append(("way", f"which way is the {col[c]} cube from the gripper?", motion_plan(np.r_[d, 1.0])))
    return qa


def general_only(items: list[VQAItem]) -> list[VQAItem]:
    """``items`` without the :data:`SPATIAL_KINDS` questions."""
    return [it for it in items if it.kind not in SPATIAL_KINDS]


def generate_vqa(n_scenes: int, image_size: int = 64, seed: int = 0, progress: bool = True,
                 spatial: bool = False, spatial_camera: str | None = None) -> list[VQAItem]:
    """Render ``n_scenes`` scenes and return their questions (4 per scene, plus 2 per visible cube with
    ``spatial``, on the image of ``spatial_camera`` when given, else agentview's)."""
    from sim.manip import ManipTask

    if n_scenes < 1:
        raise ValueError(f"n_scenes must be >= 1, got {n_scenes}")
    if spatial_camera is not None and not spatial:
        raise ValueError("spatial_camera needs spatial=True")
    rng = np.random.default_rng(seed)
    items: list[VQAItem] = []
    with ManipTask(task="stack", image_size=image_size) as task:
        sim = task.env.sim
        addr = {c: sim.model.get_joint_qpos_addr(getattr(task.env, c).joints[0])[0] for c in ("cubeA", "cubeB")}
        task.reset(seed)
        for s in tqdm(range(n_scenes), desc="vqa scenes", disable=not progress, leave=False):
            layout = LAYOUTS[int(rng.integers(len(LAYOUTS)))]
            names = rng.choice(list(PALETTE), size=2, replace=False)
            col = {"cubeA": str(names[0]), "cubeB": str(names[1])}
            for c in col:
                _recolour(sim, c, PALETTE[col[c]])
            table = str(rng.choice(list(TABLE_PALETTE)))
            _recolour_table(sim, TABLE_PALETTE[table])
            xy = lambda: np.array([rng.uniform(-0.08, 0.08), rng.uniform(-0.16, 0.16)])  # noqa: E731
            pos: dict[str, np.ndarray] = {}
            top = None
            if layout == "side":
                pa = xy()
                pb = xy()
                while abs(pa[1] - pb[1]) < 0.07:
                    pb = xy()
                pos = {"cubeA": np.r_[pa, TABLE_Z + HALF["cubeA"]], "cubeB": np.r_[pb, TABLE_Z + HALF["cubeB"]]}
            elif layout == "stacked":
                top, bottom = ("cubeA", "cubeB") if rng.random() < 0.5 else ("cubeB", "cubeA")
                p = xy()
                pos[bottom] = np.r_[p, TABLE_Z + HALF[bottom]]
                pos[top] = np.r_[p, TABLE_Z + 2 * HALF[bottom] + HALF[top]]
            else:
                keep = "cubeA" if rng.random() < 0.5 else "cubeB"
                gone = "cubeB" if keep == "cubeA" else "cubeA"
                pos = {keep: np.r_[xy(), TABLE_Z + HALF[keep]], gone: np.array([3.0, 3.0, -1.0])}
            for c, p in pos.items():
                _place(sim, addr[c], tuple(float(v) for v in p))
            sim.forward()
            img = task.render()
            assert img is not None
            qa = _scene_questions(rng, layout, col, pos, top, table)
            for kind, q, a in qa:
                items.append(VQAItem(img, q, a, kind, s))
            if spatial:
                view = img if spatial_camera is None else task.render(spatial_camera)
                assert view is not None
                for kind, q, a in _spatial_questions(col, pos, task.ee_pos()):
                    items.append(VQAItem(view, q, a, kind, s))
    return items


def split_vqa(items: list[VQAItem], held_out: float = 0.25) -> tuple[list[VQAItem], list[VQAItem]]:
    """``(train, test)`` by scene: the last ``held_out`` fraction of scenes is the test split."""
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must be in (0, 1), got {held_out}")
    scenes = sorted({it.scene for it in items})
    cut = scenes[int(round(len(scenes) * (1.0 - held_out)))] if len(scenes) > 1 else scenes[0] + 1
    return [it for it in items if it.scene < cut], [it for it in items if it.scene >= cut]


def save_vqa(items: list[VQAItem], path: str | Path) -> Path:
    """Cache ``items`` as one ``.npz`` (each distinct image stored once: one per scene, two with a spatial camera),
    written atomically so a process reading the cache never sees a half-written file."""
    index: dict[int, int] = {}
    images = []
    for it in items:
        if id(it.image) not in index:
            index[id(it.image)] = len(images)
            images.append(it.image)
    return save_npz(path, images=np.stack(images), image_index=np.asarray([index[id(it.image)] for it in items]),
                    scene=np.asarray([it.scene for it in items]), question=np.asarray([it.question for it in items]),
                    answer=np.asarray([it.answer for it in items]), kind=np.asarray([it.kind for it in items]))


def load_vqa(path: str | Path) -> list[VQAItem]:
    """Read a :func:`save_vqa` cache (or an older one with one image per scene); ``ValueError`` naming it when it is
    missing, truncated or not one."""
    try:
        with load_npz(path) as z:
            images = list(z["images"])  # one array per stored image, shared by its items (re-saving keeps it once)
            if "image_index" in z.files:
                where = [int(i) for i in z["image_index"]]
            else:  # caches written before spatial cameras: images per scene, in scene_ids order
                row = {int(sc): i for i, sc in enumerate(z["scene_ids"])}
                where = [row[int(sc)] for sc in z["scene"]]
            return [VQAItem(images[i], str(q), str(a), str(k), int(sc))
                    for i, sc, q, a, k in zip(where, z["scene"], z["question"], z["answer"], z["kind"], strict=True)]
    except NPZ_READ_ERRORS as exc:
        raise ValueError(f"unreadable VQA cache {path} ({type(exc).__name__}: {exc})") from exc


def cached_vqa(cache_dir: str | Path, n_scenes: int, image_size: int = 64, seed: int = 0,
               progress: bool = True, spatial: bool = False, spatial_camera: str | None = None) -> list[VQAItem]:
    """:func:`generate_vqa`, read from ``cache_dir`` when an earlier call saved the same set (written only when
    generated, atomically, so parallel processes can share the cache)."""
    tag = "vqa3s" if spatial else "vqa3"  # vqa3: scenes from a seeded robosuite model (ManipTaskConfig.model_seed)
    if spatial_camera is not None:
        tag += f"_{spatial_camera}"
    path = Path(cache_dir) / f"{tag}_{image_size}px_{n_scenes}scenes_seed{seed}.npz"
    if path.is_file():
        try:
            return load_vqa(path)
        except ValueError as exc:
            log.warning("%s; generating it again", exc)
    items = generate_vqa(n_scenes, image_size, seed, progress, spatial, spatial_camera)
    save_vqa(items, path)
    return items
