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
    # the two that take a dispatch key, which sgl_kernel's renamed imports reach through the shim
    f"torch::Library::Library(torch::Library::Kind, {STR}, std::optional<c10::DispatchKey>, char const*, "
    "unsigned int)",
    "torch::Library::_impl(char const*, torch::CppFunction&&, torch::_RegisterOrVerify) &",
}
RENAMES = SHIM.parent / "sgl_kernel_renames.txt"


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
    # build_site.sh points sgl_kernel's imports of torch's key-taking entry points at the shim's C functions
    renames = [line.split() for line in RENAMES.read_text().splitlines() if line.strip()]
    raw_defined = set(subprocess.run(["nm", "--defined-only", "--extern-only", str(obj)], check=True,
                                     capture_output=True, text=True).stdout.split())
    raw_undefined = set(subprocess.run(["nm", "--undefined-only", str(obj)], check=True, capture_output=True,
                                       text=True).stdout.split())
    assert len(renames) == 2 and all(len(r) == 2 for r in renames)
    assert all(old in raw_undefined and new in raw_defined for old, new in renames), renames


# c10::DispatchKey values read from both wheels' libc10 (toString of every value): 2.14.1's, then 2.11.0's.
KEYS = {"CPU": (49, 50), "CUDA": (50, 51), "Meta": (64, 65), "AutogradCUDA": (135, 136),
        "CompositeImplicitAutograd": (151, 152), "Python": (13, 12), "Fake": (12, 13), "Conjugate": (16, 17),
        "BackendSelect": (11, 11)}

DRIVER = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
struct Key { uint16_t key; bool engaged; };
struct Fn { Key key; };  // what the shim may touch of a torch::CppFunction: its leading optional<DispatchKey>
static int got_kind; static std::string got_ns; static Key got_ctor_key, got_impl_key; static const char* got_name;
// torch 2.11's entry points, as stubs that record what reached them
void ctor211(void*, int kind, std::string ns, Key key, const char*, uint32_t)
    asm("_ZN5torch7LibraryC1ENS0_4KindENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt8optionalIN3c1011DispatchKeyEEPKcj");
void ctor211(void*, int kind, std::string ns, Key key, const char*, uint32_t) {
  got_kind = kind; got_ns = ns; got_ctor_key = key; }
void* impl211(void* self, const char* name, Fn* fn, int)
    asm("_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE");
void* impl211(void* self, const char* name, Fn* fn, int) { got_name = name; got_impl_key = fn->key; return self; }
void check211(int, const char*, const char*, uint32_t, bool) asm("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb");
void check211(int, const char*, const char*, uint32_t, bool) {}
struct Loc { const char* f; const char* file; uint32_t line; };
void err211(void*, Loc, std::string)
    asm("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void err211(void*, Loc, std::string) {}
extern void* vt211[4] asm("_ZTVN3c1019NotImplementedErrorE");
void* vt211[4] = {};
void* def_schema211(void* s, void*, void*, const std::vector<int>&, int)
    asm("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorIN2at3TagESaIS8_EENS_17_RegisterOrVerifyE");
void* def_schema211(void* s, void*, void*, const std::vector<int>&, int) { return s; }
void* def_fn211(void* s, void*, Fn* fn, const std::vector<int>&)
    asm("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorIN2at3TagESaISB_EE");
void* def_fn211(void* s, void*, Fn* fn, const std::vector<int>&) { got_impl_key = fn->key; return s; }
// what sgl_kernel calls once build_site.sh has renamed its imports, and the 2.14-only _def
extern "C" void astra_shim_torch_library_ctor(void*, int, std::string, Key, const char*, uint32_t);
extern "C" void* astra_shim_torch_library_impl(void*, const char*, Fn*, int);
void* def_fn214(void*, void*, Fn*, const std::vector<int>&)
    asm("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorINS_10headeronly3TagESaISB_EE");
int main(int argc, char** argv) {
  char lib[64];
  for (int i = 1; i < argc; ++i) {
    uint16_t k = (uint16_t)atoi(argv[i]);
    Fn fn{{k, true}};
    astra_shim_torch_library_impl(lib, "sgl_kernel::op", &fn, 0);
    uint16_t impl = got_impl_key.key;
    astra_shim_torch_library_ctor(lib, 2, std::string("sgl_kernel"), Key{k, true}, "f.cc", 21);
    Fn fn2{{k, true}};
    def_fn214(lib, nullptr, &fn2, {});
    printf("%u %u %u %u %s %d %s\n", k, impl, got_ctor_key.key, got_impl_key.key, got_ns.c_str(), got_kind, got_name);
  }
  Fn none{{0, false}};
  astra_shim_torch_library_impl(lib, "sgl_kernel::catchall", &none, 0);
  printf("none %d %u\n", got_impl_key.engaged, got_impl_key.key);
}
"""


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_the_shim_renumbers_dispatch_keys_from_torch_214_to_211(tmp_path: Path) -> None:
    """sgl_kernel's `m.impl(name, torch::kCUDA, fn)` carries torch 2.14's number for CUDA, which is torch 2.11's
    CPU: without the renumbering every sgl_kernel op ran "only available for these backends: [CPU, ...]" on the
    H200. The shim, linked here against stubs of torch 2.11's entry points, must hand them 2.11's numbers, leave
    a registration without a key alone, and pass the rest of the call through."""
    driver = tmp_path / "driver.cpp"
    driver.write_text(DRIVER)
    exe = tmp_path / "driver"
    subprocess.run(["g++", "-std=c++17", "-O1", str(SHIM), str(driver), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), *(str(v214) for v214, _ in KEYS.values())], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    for (name, (v214, v211)), line in zip(KEYS.items(), out):
        k, impl, ctor, defined, ns, kind, op = line.split()
        assert (int(k), int(impl), int(ctor), int(defined)) == (v214, v211, v211, v211), (name, line)
        assert (ns, kind, op) == ("sgl_kernel", "2", "sgl_kernel::op")
    assert out[-1] == "none 0 0"
