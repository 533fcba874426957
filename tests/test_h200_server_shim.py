"""The torch-2.11 shim for sgl_kernel (scripts/h200_server/): compiled here, its symbols read back with nm and
c++filt. The five it defines must be exactly what sglang-kernel 0.4.10's sm90 library imports and torch 2.11
lacks (measured on the H200 and from both torch wheels with nm -D), and what it calls must be torch 2.11's own
exports. A wrong mangled name would only show as an undefined symbol on the GPU machine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[1] / "scripts" / "h200_server" / "sgl_kernel_torch211_shim.cpp"
STR = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >"

DEFINES_214 = {
    "c10::cuda::CUDAErrorLogCapture::CUDAErrorLogCapture()",
    "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool, "
    "c10::cuda::CUDAErrorLogCapture*)",
    f"c10::NotImplementedError::NotImplementedError(c10::SourceLocation, {STR})",
    "torch::Library::_def(c10::FunctionSchema&&, c10::OperatorName*, std::vector<torch::headeronly::Tag, "
    "std::allocator<torch::headeronly::Tag> > const&, torch::_RegisterOrVerify) &",
    "torch::Library::_def(std::variant<c10::OperatorName, c10::FunctionSchema>&&, torch::CppFunction&&, "
    "std::vector<torch::headeronly::Tag, std::allocator<torch::headeronly::Tag> > const&) &",
}
CALLS_211 = {
    "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)",
    f"c10::Error::Error(c10::SourceLocation, {STR})",
    "vtable for c10::NotImplementedError",
    "torch::Library::_def(c10::FunctionSchema&&, c10::OperatorName*, std::vector<at::Tag, "
    "std::allocator<at::Tag> > const&, torch::_RegisterOrVerify) &",
    "torch::Library::_def(std::variant<c10::OperatorName, c10::FunctionSchema>&&, torch::CppFunction&&, "
    "std::vector<at::Tag, std::allocator<at::Tag> > const&) &",
}


@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("nm") and shutil.which("c++filt")),
                    reason="needs g++, nm and c++filt")
def test_the_shim_defines_the_five_missing_symbols_and_calls_only_torch_211_exports(tmp_path: Path) -> None:
    obj = tmp_path / "shim.o"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-c", str(SHIM), "-o", str(obj)], check=True)

    def symbols(*flags: str) -> set[str]:
        raw = subprocess.run(["nm", *flags, str(obj)], check=True, capture_output=True, text=True).stdout
        names = [line.split()[-1] for line in raw.splitlines() if line.strip()]
        out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
        return set(out.splitlines())

    defined = {s for s in symbols("--defined-only", "--extern-only") if s.startswith(("c10::", "torch::"))}
    assert defined == DEFINES_214
    undefined = {s for s in symbols("--undefined-only") if "c10::" in s or "torch::" in s}
    assert undefined == CALLS_211
