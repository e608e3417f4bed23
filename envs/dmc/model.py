"""The suite's own MJCF files (read from the installed dm_control package, never copied) and the pool's model.

dm_control builds some models by editing the XML (quadruped and dog remove
walls, balls and targets and set the floor size); `suite_spec` loads the file
as an `MjSpec` and tasks repeat those edits on it, so the compiled model equals
dm_control's array for array (a parity test checks this).

Every suite model carries an 800x4800 skybox texture (11.5 MB) and the dog
also 162 bone meshes, a skin and its texture (73 MB in all). The pool clones
its model once per env, so `lean_model` leaves these render-only assets out:
textures, skins, and meshes of geoms that never collide. Such geoms still add
mass, so each body keeps its compiled inertia explicitly; the compiled physics
(masses, inertias, joints, colliding geoms, actuators, sensors, options) stays
identical to the full model's, which the env keeps for rendering.
"""

from __future__ import annotations

import importlib.util
import os

import mujoco
import numpy as np


def suite_dir() -> str:
    """Folder of the installed `dm_control.suite` package (found without importing dm_control)."""
    spec = importlib.util.find_spec("dm_control")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the DeepMind Control Suite tasks need the dm-control package (pip install dm-control)"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "suite")


def suite_spec(filename: str) -> mujoco.MjSpec:
    """The suite's MJCF file `filename` (e.g. `dog.xml`) as an MjSpec; its includes and meshes resolve in place."""
    path = os.path.join(suite_dir(), filename)
    if not os.path.exists(path):
        raise FileNotFoundError(f"dm_control suite asset {filename!r} not found at {path}")
    return mujoco.MjSpec.from_file(path)


def _is_visual_mesh(geom: mujoco.MjsGeom) -> bool:
    return geom.type == mujoco.mjtGeom.mjGEOM_MESH and geom.contype == 0 and geom.conaffinity == 0


def lean_model(spec: mujoco.MjSpec, full: mujoco.MjModel) -> mujoco.MjModel:
    """Compile `spec` (not yet compiled, equal to the one `full` came from) without render-only assets."""
    for material in spec.materials:
        material.textures = [""] * len(material.textures)
    for texture in list(spec.textures):
        spec.delete(texture)
    for skin in list(spec.skins):
        spec.delete(skin)
    visual = [g for g in spec.geoms if _is_visual_mesh(g)]
    if visual:
        # the geoms leave, their mass stays: every body keeps the inertia compiled from all its geoms
        for body in spec.bodies:
            if body.name == "world":
                continue
            if not body.name:
                raise ValueError("lean_model needs named bodies to carry their inertia over")
            i = full.body(body.name).id
            body.explicitinertial = True
            body.mass = full.body_mass[i]
            body.ipos = full.body_ipos[i]
            body.iquat = full.body_iquat[i]
            body.inertia = full.body_inertia[i]
            body.fullinertia = [np.nan] * 6
        for geom in visual:
            spec.delete(geom)
    used_meshes = {g.meshname for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH}
    for mesh in list(spec.meshes):
        if mesh.name not in used_meshes:
            spec.delete(mesh)
    used_hfields = {g.hfieldname for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_HFIELD}
    for hfield in list(spec.hfields):
        if hfield.name not in used_hfields:
            spec.delete(hfield)
    model = spec.compile()
    # the compiler derives a rotational dof's length from its body's geoms; MuJoCo reads it only for
    # sleeping islands (off in these models), copied so that no physics array differs
    model.dof_length[:] = full.dof_length
    return model
