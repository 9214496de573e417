"""tools/examples/generate.py streams the same text as the C++ path (vm-run --vocab)."""

import os
import subprocess
import sys

from conftest import BUILD, ROOT


def test_generate_example_prints_what_vm_run_prints(tmp_path):
    args = ["--prompt", "In the", "--length", "80", "--temperature", "0.8", "--seed", "7"]
    env = dict(os.environ)
    python = subprocess.run([sys.executable, str(ROOT / "tools/examples/generate.py"), *args],
                            check=True, capture_output=True, text=True, env=env).stdout
    dvm = tmp_path / "charlm.dvm"
    subprocess.run([str(BUILD / "tools/vm-compile"), str(ROOT / "tools/lm/charlm.onnx"), "-o",
                    str(dvm), "--bound", "batch=1", "--bound", "max_new_tokens=4096", "--bound",
                    "prompt_len=1024"], check=True, capture_output=True)
    cpp = subprocess.run([str(BUILD / "tools/vm-run"), str(dvm), "--vocab",
                          str(ROOT / "tools/lm/vocab.txt"), "--text", "prompt=In the", "--set",
                          "max_new_tokens=80", "--set", "temperature=0.8", "--set", "seed=7",
                          "--set", "stop_token=-1", "--stream-prefix", "In the"],
                         check=True, capture_output=True, text=True).stdout
    assert cpp.endswith("tokens i64 [1,80]\n")
    want = cpp[: -len("tokens i64 [1,80]\n")]
    assert python == want
    assert len(python) == len("In the") + 80 + 1


def test_the_readme_python_example_works_when_pasted(monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using dynvm from Python"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[: code.index("```")]
    monkeypatch.chdir(ROOT)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("[[ 3 14 ") and printed.rstrip().endswith("(1, 24)")
