from simcalib.seeding import derive_seed, run_seed


def test_run_seed_is_a_pure_function_of_the_run_identity():
    assert run_seed(10, "Cora", "GCN", 0, 1, 2) == run_seed(10, "cora", "gcn", 0, 1, 2)
    seeds = {run_seed(10, "Cora", "GCN", s, i, f) for s in range(5) for i in range(5) for f in range(3)}
    assert len(seeds) == 75
    assert run_seed(10, "Cora", "GCN", 0, 0, 0) != run_seed(11, "Cora", "GCN", 0, 0, 0)
    assert run_seed(10, "Cora", "GCN", 0, 0, 0) != run_seed(10, "Cora", "GAT", 0, 0, 0)


def test_derived_seeds_fit_in_31_bits():
    assert all(0 <= derive_seed("x", i) < 2**31 for i in range(100))
