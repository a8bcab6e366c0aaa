"""Ring edits of molecular skeletons (``gpse_dgl.data.skeleton_edits``) and their use as extra
pretraining graphs (``train.data.add_skeleton_edits``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpse_dgl.data.skeleton_edits import EDIT_KINDS, edit_skeleton, ring_bond_mask
from gpse_dgl.pse.cycles import count_cycles
from gpse_dgl.utils.graph import simple_edges

RING6 = (6, np.array([0, 1, 2, 3, 4, 0]), np.array([1, 2, 3, 4, 5, 5]))
# naphthalene-like skeleton (two fused 6-rings) with a methyl and an ethyl chain
BICYCLE = (13, np.array([0, 1, 2, 3, 4, 0, 4, 6, 7, 8, 5, 2, 3, 11]),
           np.array([1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 9, 10, 11, 12]))


def cycles(graph) -> dict[int, int]:
    n, u, v = graph
    counts = count_cycles(n, u, v)[0]
    return {k: int(c) for k, c in zip(range(2, 9), counts) if k > 2 and c}


def is_connected(n, u, v) -> bool:
    parent = list(range(n))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in zip(u.tolist(), v.tolist()):
        parent[find(a)] = find(b)
    return len({find(a) for a in range(n)}) == 1


def bridges_by_deletion(n, u, v) -> np.ndarray:
    """An edge is on a ring iff the graph without it keeps the same number of components."""
    def components(us, vs):
        parent = list(range(n))

        def find(a):
            while parent[a] != a:
                a = parent[a]
            return a

        for a, b in zip(us, vs):
            parent[find(a)] = find(b)
        return len({find(a) for a in range(n)})

    full = components(u.tolist(), v.tolist())
    return np.array([components(np.delete(u, i).tolist(), np.delete(v, i).tolist()) == full
                     for i in range(len(u))])


@pytest.mark.parametrize("seed", range(6))
def test_ring_bonds_match_deletion_check(seed):
    rng = np.random.default_rng(seed)
    n = 25
    u, v = simple_edges(rng.integers(0, n, 30), rng.integers(0, n, 30), n)
    assert np.array_equal(ring_bond_mask(n, u, v), bridges_by_deletion(n, u, v))


def test_each_edit_changes_the_rings_as_described():
    assert cycles(RING6) == {6: 1}
    assert cycles(edit_skeleton(*RING6, np.random.default_rng(0), kind="grow")) == {7: 1}
    assert cycles(edit_skeleton(*RING6, np.random.default_rng(0), kind="shrink")) == {5: 1}
    sizes = set()
    for seed in range(40):
        for kind in ("attach", "fuse"):
            edited = edit_skeleton(*RING6, np.random.default_rng(seed), kind=kind)
            new = {k: c for k, c in cycles(edited).items() if k != 6}
            if kind == "attach":  # a separate ring: the 6-ring stays, one new ring of size k
                assert cycles(edited).get(6, 0) >= 1 and sum(new.values()) <= 1
                size = edited[0] - 6
            else:  # fused over a bond: a new ring of size k and the outer ring of 6 + k - 2 (counted up to 8)
                size = edited[0] - 6 + 2
                outer = 6 + size - 2
                assert cycles(edited).get(size, 0) >= 1 and (outer > 8 or cycles(edited).get(outer, 0) >= 1)
            sizes.add(size)
    assert sizes == {3, 4, 5, 6, 7, 8}
    # a triangle shrinks to a bond: no ring left
    triangle = (3, np.array([0, 0, 1]), np.array([1, 2, 2]))
    n, u, v = edit_skeleton(*triangle, np.random.default_rng(0), kind="shrink")
    assert (n, u.tolist(), v.tolist()) == (2, [0], [1])


def test_edits_are_simple_connected_and_respect_the_degree_cap():
    assert is_connected(*BICYCLE) and cycles(BICYCLE) == {6: 2}
    rng = np.random.default_rng(1)
    for _ in range(300):
        edited = edit_skeleton(*BICYCLE, rng)
        assert edited is not None
        n, u, v = edited
        assert np.all(u < v) and len(set(zip(u.tolist(), v.tolist()))) == len(u)
        assert u.max() < n and v.max() < n and is_connected(n, u, v)
        assert np.bincount(np.concatenate([u, v]), minlength=n).max() <= 4


def test_no_place_for_an_edit_gives_none_and_bad_kind_raises():
    chain = (4, np.array([0, 1, 2]), np.array([1, 2, 3]))
    assert edit_skeleton(*chain, np.random.default_rng(0), kind="grow") is None
    assert edit_skeleton(*chain, np.random.default_rng(0), kind="shrink") is None
    star = (5, np.array([0, 0, 0, 0]), np.array([1, 2, 3, 4]))  # no atom with a free valence pair
    assert edit_skeleton(*star, np.random.default_rng(0), kind="fuse") is None
    with pytest.raises(ValueError, match="unknown skeleton edit 'twist'"):
        edit_skeleton(*chain, np.random.default_rng(0), kind="twist")
    assert set(EDIT_KINDS) == {"grow", "shrink", "attach", "fuse"}


def test_added_edits_are_training_only_new_and_seeded():
    from gpse_dgl.data.molecules import load_embedded_molecules
    from gpse_dgl.train.pretraining.graph_sources import _skeleton_key, add_skeleton_edits
    from gpse_dgl.utils.graph import graph_simple_edges

    graphs = load_embedded_molecules()[:200]
    split = torch.tensor([0] * 150 + [1] * 25 + [2] * 25)
    out, codes, stats = add_skeleton_edits(graphs, split, 0.5, seed=3)
    assert stats["added"] == stats["wanted"] == 75 and len(out) == 275
    assert torch.equal(codes[:200], split) and bool((codes[200:] == 0).all())
    keys = [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in out]
    assert len(set(keys)) == len(keys)  # no edit repeats a source graph (held-out ones included) or another edit
    again, _, _ = add_skeleton_edits(graphs, split, 0.5, seed=3)
    assert [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in again] == keys
    other, _, _ = add_skeleton_edits(graphs, split, 0.5, seed=4)
    assert [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in other[200:]] != keys[200:]


def test_graphs_above_the_comparison_size_are_not_edited():
    from gpse_dgl.data.molecules import load_embedded_molecules
    from gpse_dgl.train.pretraining.data import add_skeleton_edits

    graphs = load_embedded_molecules()[:40]
    split = torch.tensor([0] * 30 + [1] * 5 + [2] * 5)
    small_train = sum(1 for g in graphs[:30] if g.num_nodes() <= 12)
    out, codes, stats = add_skeleton_edits(graphs, split, 1.0, seed=0, max_nodes=12)
    assert stats["wanted"] == small_train and 0 < small_train < 30
    assert all(g.num_nodes() <= 12 + 8 for g in out[40:])  # an edit adds at most 8 atoms
    out, codes, stats = add_skeleton_edits(graphs, split, 1.0, seed=0, max_nodes=1)
    assert stats == {"wanted": 0, "added": 0, "attempts": 0} and len(out) == 40


def test_an_edit_equal_to_a_held_out_graph_is_never_added():
    """Growing the training 6-ring gives the 7-ring, which is a validation graph here: it must be
    drawn again (about a quarter of all draws are 'grow')."""
    from gpse_dgl.data.synthetic import undirected_graph
    from gpse_dgl.train.pretraining.graph_sources import _skeleton_key, add_skeleton_edits
    from gpse_dgl.utils.graph import graph_simple_edges

    ring = [undirected_graph(k, np.arange(k), (np.arange(k) + 1) % k) for k in (6, 7, 8)]
    split = torch.tensor([0, 1, 2])
    out, _, stats = add_skeleton_edits(ring, split, 10.0, seed=0)
    assert stats["added"] == 10
    keys = [_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in out]
    assert len(set(keys)) == len(keys)  # in particular, neither the 7-ring nor the 8-ring was added again
    assert sum(cycles((g.num_nodes(), *graph_simple_edges(g))) == {7: 1} for g in out) == 1
