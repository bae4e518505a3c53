"""Break lopa on purpose, run fast-stage tests, restore. Usage: python mutate.py NAME"""
import shutil, subprocess, sys, os
from pathlib import Path
ROOT = Path("/work/main")
MUTATIONS = {
    "always-accept": ("src/lopa/decode/verify.py",
        "        nxt = next((c for c in tree.children[path[-1]] if tree.tokens[c] == want), None)",
        "        nxt = tree.children[path[-1]][0] if tree.children[path[-1]] else None  # MUTATION: always accept",
        ["tests/test_greedy.py", "tests/test_tree.py"]),
    "sibling-mask": ("src/lopa/draft/tree.py",
        "        return torch.tensor(self.tokens), torch.tensor(self.depths), ancestors",
        "        for i, p in enumerate(self.parents):  # MUTATION: a node also sees its siblings\n"
        "            for j, q in enumerate(self.parents):\n"
        "                if p >= 0 and p == q:\n"
        "                    ancestors[i, j] = True\n"
        "        return torch.tensor(self.tokens), torch.tensor(self.depths), ancestors",
        ["tests/test_runner.py", "tests/test_greedy.py::test_lopa_matches_stock_generate"]),
    "perturb-packed": ("src/lopa/models/fastlinear.py",
        "        self.packed = pack_weight(linear.weight)",
        "        self.packed = pack_weight(linear.weight + 1e-3 * torch.randn_like(linear.weight))  # MUTATION",
        ["tests/test_fast_runner.py::test_packed_model_matches_stock_logits", "tests/test_greedy.py::test_lopa_matches_stock_generate"]),
    "sampler-noise": ("src/lopa/decode/sampling.py",
        "            self.noise[position] = -torch.log(-torch.log(uniform))  # u = 0 gives -inf: never chosen",
        "            self.noise[position] = -torch.log(uniform)  # MUTATION: exponential noise, not Gumbel",
        ["tests/test_sampling.py"]),
    "sampler-uncoupled": ("src/lopa/decode/sampling.py",
        "            bits = np.random.Philox(key=self.seed % 2**64, counter=[0, position, 0, 0])",
        "            bits = np.random.Philox(key=self.seed % 2**64, counter=[0, len(self.noise), 0, 0])  # MUTATION: by draw",
        ["tests/test_sampling.py", "tests/test_seeded.py"]),
}
name = sys.argv[1]
path, old, new, tests = MUTATIONS[name]
file = ROOT / path
original = file.read_text()
assert original.count(old) == 1, name
try:
    file.write_text(original.replace(old, new))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line", *tests], cwd=ROOT, capture_output=True, text=True)
    print(f"## mutation {name}: {path}\n-{old}\n+{new}\n$ python -m pytest -q {' '.join(tests)}\n")
    print("\n".join(l for l in r.stdout.splitlines() if l.startswith(("FAILED", "ERROR")) or " passed" in l or " failed" in l))
finally:
    file.write_text(original)
