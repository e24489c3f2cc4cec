"""Turn a :class:`House` plus a lighting spec into MuJoCo MJCF XML (visual-only geoms, no physics)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.nav.conditions import LightingSpec
from sim.nav.furniture import FurnitureItem
from sim.nav.house import House

#: (builtin, rgb1, rgb2, mark, texrepeat) for floors: tiles, parquet-like stripes, carpet noise ...
FLOOR_STYLES = [
    ("checker", (0.82, 0.8, 0.74), (0.62, 0.6, 0.55), "edge", 4.0),
    ("checker", (0.55, 0.38, 0.22), (0.48, 0.32, 0.18), "none", 8.0),
    ("flat", (0.42, 0.45, 0.52), (0.3, 0.3, 0.35), "random", 1.0),
    ("checker", (0.9, 0.9, 0.92), (0.2, 0.22, 0.25), "none", 3.0),
    ("gradient", (0.7, 0.58, 0.42), (0.55, 0.44, 0.3), "none", 2.0),
    ("flat", (0.6, 0.3, 0.28), (0.45, 0.2, 0.18), "random", 1.0),
]
WALL_STYLES = [
    ((0.93, 0.91, 0.86), (0.8, 0.78, 0.72)), ((0.78, 0.86, 0.9), (0.6, 0.7, 0.76)),
    ((0.95, 0.88, 0.75), (0.82, 0.74, 0.6)), ((0.82, 0.9, 0.8), (0.66, 0.76, 0.64)),
    ((0.9, 0.8, 0.82), (0.76, 0.64, 0.66)), ((0.85, 0.85, 0.85), (0.7, 0.7, 0.7)),
]
MAX_ROOM_LIGHTS = 7  # OpenGL renders 8 lights; one is the sun


@dataclass(frozen=True)
class RenderQuality:
    """Renderer settings: multisampling, shadow map size and whether the sun casts shadows."""

    name: str
    offsamples: int
    shadowsize: int
    shadows: bool


QUALITIES = {
    "high": RenderQuality("high", 4, 2048, True),
    "default": RenderQuality("default", 4, 1024, False),
    "fast": RenderQuality("fast", 0, 1024, False),
}


def get_quality(name: str) -> RenderQuality:
    if name not in QUALITIES:
        raise ValueError(f"unknown render quality {name!r}; known: {sorted(QUALITIES)}")
    return QUALITIES[name]


def _f(*v: float) -> str:
    return " ".join(f"{x:.6g}" for x in v)


def item_geom_name(index: int, item: FurnitureItem) -> str:
    """MuJoCo geom name of the house's ``index``-th furniture item."""
    return f"item_{index}_{item.colour}_{item.name.replace(' ', '_')}"


def build_mjcf(house: House, lighting: LightingSpec, quality: RenderQuality, width: int = 224,
               height: int = 224, fovy_deg: float = 79.0) -> str:
    """MJCF for the house. ``statistic extent=1`` makes znear/zfar/fog distances metric."""
    bx0, by0, bx1, by1 = house.bounds
    cx, cy = (bx0 + bx1) / 2, (by0 + by1) / 2
    fog = lighting.fog
    fog_xml = ""
    if fog is not None:
        fog_xml = f'<rgba fog="{_f(*fog[2])}"/>'
    fogstart, fogend = (fog[0], fog[1]) if fog is not None else (100.0, 200.0)
    a = []
    a.append(f'<mujoco model="{house.scene_id}">')
    a.append(f'<statistic extent="1" center="{_f(cx, cy, 1.0)}"/>')
    a.append("<visual>")
    a.append(f'<global offwidth="{max(width, 64)}" offheight="{max(height, 64)}" fovy="{fovy_deg:.4g}"/>')
    a.append(f'<quality shadowsize="{quality.shadowsize}" offsamples="{quality.offsamples}"/>')
    a.append(f'<headlight ambient="{_f(*(3 * [lighting.headlight_ambient]))}" '
             f'diffuse="{_f(*(3 * [lighting.headlight_diffuse]))}" specular="0.05 0.05 0.05"/>')
    a.append(f'<map znear="0.03" zfar="60" fogstart="{fogstart:.4g}" fogend="{fogend:.4g}"/>')
    a.append(fog_xml)
    a.append("</visual>")
    a.append("<asset>")
    a.append(f'<texture name="sky" type="skybox" builtin="gradient" rgb1="{_f(*lighting.sky_rgb1)}" '
             f'rgb2="{_f(*lighting.sky_rgb2)}" width="64" height="64"/>')
    a.append('<texture name="ground" type="2d" builtin="checker" rgb1=".35 .38 .3" rgb2=".3 .33 .26" '
             'width="64" height="64"/>')
    a.append('<material name="ground" texture="ground" texrepeat="40 40"/>')
    for k, (builtin, c1, c2, mark, rep) in enumerate(FLOOR_STYLES):
        extra = ' random="0.08"' if mark == "random" else ""
        a.append(f'<texture name="floor{k}" type="2d" builtin="{builtin}" rgb1="{_f(*c1)}" rgb2="{_f(*c2)}" '
                 f'mark="{mark}" markrgb="0.3 0.3 0.3"{extra} width="128" height="128"/>')
        a.append(f'<material name="floor{k}" texture="floor{k}" texrepeat="{rep:g} {rep:g}" texuniform="true" '
                 'reflectance="0.05"/>')
    for k, (c1, c2) in enumerate(WALL_STYLES):
        a.append(f'<texture name="wall{k}" type="2d" builtin="flat" rgb1="{_f(*c1)}" rgb2="{_f(*c2)}" '
                 f'mark="random" random="0.04" markrgb="{_f(*c2)}" width="128" height="128"/>')
        a.append(f'<material name="wall{k}" texture="wall{k}" texrepeat="2 2" texuniform="true"/>')
    a.append("</asset>")
    a.append('<default><geom contype="0" conaffinity="0"/></default>')
    a.append("<worldbody>")
    a.append(f'<light name="sun" directional="true" pos="{_f(cx, cy, 10)}" dir="0.3 0.2 -1" '
             f'diffuse="{_f(*(3 * [0.35 * lighting.light_scale]))}" specular="0.1 0.1 0.1" '
             f'ambient="{_f(*(3 * [0.12 * lighting.ambient_scale]))}" castshadow="{str(quality.shadows).lower()}"/>')
    rooms_lit = sorted(house.rooms, key=lambda r: -r.area)[:MAX_ROOM_LIGHTS]
    for r in rooms_lit:
        rx, ry = r.center
        a.append(f'<light name="lamp_{r.index}" pos="{_f(rx, ry, 2.4)}" dir="0 0 -1" '
                 f'diffuse="{_f(*(3 * [0.45 * lighting.light_scale]))}" specular="0.05 0.05 0.05" '
                 f'attenuation="1 0 0.02" castshadow="false"/>')
    a.append(f'<geom name="ground" type="plane" size="{_f(bx1 - bx0 + 40, by1 - by0 + 40, 1)}" '
             f'pos="{_f(cx, cy, -0.02)}" material="ground"/>')
    for r in house.rooms:
        rx, ry = r.center
        a.append(f'<geom name="floor_{r.index}" type="box" size="{_f((r.x1 - r.x0) / 2, (r.y1 - r.y0) / 2, 0.01)}" '
                 f'pos="{_f(rx, ry, -0.01)}" material="floor{r.floor_style % len(FLOOR_STYLES)}"/>')
    for i, w in enumerate(house.walls):
        half_t = w.thickness / 2
        sx = abs(w.x1 - w.x0) / 2 if w.y0 == w.y1 else half_t
        sy = abs(w.y1 - w.y0) / 2 if w.x0 == w.x1 else half_t
        room = house.room_at((w.x0 + w.x1) / 2, (w.y0 + w.y1) / 2)
        mat = f"wall{(room.wall_style if room else 0) % len(WALL_STYLES)}"
        a.append(f'<geom name="wall_{i}" type="box" size="{_f(sx, sy, w.height / 2)}" '
                 f'pos="{_f((w.x0 + w.x1) / 2, (w.y0 + w.y1) / 2, w.height / 2)}" material="{mat}"/>')
    for i, it in enumerate(house.furniture):
        name = item_geom_name(i, it)
        if it.shape == "cylinder":
            a.append(f'<geom name="{name}" type="cylinder" size="{_f(min(it.sx, it.sy), it.height / 2)}" '
                     f'pos="{_f(it.x, it.y, it.height / 2)}" rgba="{_f(*it.rgba)}"/>')
        else:
            a.append(f'<geom name="{name}" type="box" size="{_f(it.sx, it.sy, it.height / 2)}" '
                     f'pos="{_f(it.x, it.y, it.height / 2)}" rgba="{_f(*it.rgba)}"/>')
    a.append(f'<camera name="agent" pos="{_f(cx, cy, 1.25)}" fovy="{fovy_deg:.4g}"/>')
    a.append("</worldbody></mujoco>")
    return "\n".join(a)
