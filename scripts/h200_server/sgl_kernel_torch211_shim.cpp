// sglang-kernel 0.4.10 is built against torch 2.14.1; the H200 image has torch 2.11. Of the 97 torch symbols
// sgl_kernel/sm90/common_ops.abi3.so imports, five are missing from torch 2.11's libraries (nm -D, both
// wheels). This library defines those five under their 2.14.1 mangled names and forwards each to what torch 2.11
// exports for the same job. It includes no torch header: the types are only passed through, by pointer.
//
//   c10::cuda::CUDAErrorLogCapture::CUDAErrorLogCapture()           2.14: an empty class; nothing to construct
//   c10::cuda::c10_cuda_check_implementation(..., CUDAErrorLogCapture*)   -> the 2.11 overload without it
//   c10::NotImplementedError::NotImplementedError(SourceLocation, std::string)
//                                        -> c10::Error's constructor, then NotImplementedError's 2.11 vtable
//   torch::Library::_def(... std::vector<torch::headeronly::Tag> const& ...)  (two overloads)
//                                        -> the at::Tag overloads, tags mapped by name (2.14 added
//                                           `inplace` and `out`, which 2.11 has no tag for: dropped)
//
// Symbols are not the only break: torch 2.14 renumbered c10::DispatchKey (it dropped `Named`, 2.11's 16, and
// swapped `Python` and `Fake`, 2.11's 12 and 13), and sgl_kernel bakes 2.14's numbers into its registrations
// (`m.impl(name, torch::kCUDA, fn)` is inline). Under torch 2.11 every CUDA kernel landed on the CPU key, seen on
// the H200 as "Could not run 'sgl_kernel::fused_add_rmsnorm' with arguments from the 'CUDA' backend ... CPU:
// registered at ../csrc/common_extension.cc:21". build_site.sh renames sgl_kernel's imports of the two torch 2.11
// entry points that take a key (Library's constructor and Library::_impl) to the extern "C" functions at the end,
// which renumber the key and forward; the 2.14-only _def overload below renumbers too. Only sgl_kernel's calls
// pass through here, never torch's own. Every other type sgl_kernel's inline code reads (TensorImpl's fields,
// IValue's tags, KernelFunction, ScalarType but the one 2.14 appended) is the same in both wheels' headers.
//
// Load it with RTLD_GLOBAL after torch and before sgl_kernel (sitecustomize.py beside this file does that).
#include <cstdint>
#include <string>
#include <vector>

namespace shim {
struct Opaque;
struct SourceLocation {  // c10::SourceLocation: {const char* function; const char* file; uint32_t line;}
  const char* function;
  const char* file;
  uint32_t line;
};
enum class Tag211 : int { core, cudagraph_unsafe, data_dependent_output, dynamic_output_shape, flexible_layout,
  generated, inplace_view, maybe_aliasing_or_mutating, needs_contiguous_strides, needs_exact_strides,
  needs_fixed_stride_order, nondeterministic_bitwise, nondeterministic_seeded, out_variant, pointwise,
  pt2_compliant_tag, reduction, view_copy };
enum class Tag214 : int { core, cudagraph_unsafe, data_dependent_output, dynamic_output_shape, flexible_layout,
  generated, inplace, inplace_view, maybe_aliasing_or_mutating, needs_contiguous_strides, needs_exact_strides,
  needs_fixed_stride_order, nondeterministic_bitwise, nondeterministic_seeded, out, out_variant, pointwise,
  pt2_compliant_tag, reduction, view_copy };

std::vector<Tag211> to211(const std::vector<Tag214>& tags) {
  static const int map[] = {0, 1, 2, 3, 4, 5, -1, 6, 7, 8, 9, 10, 11, 12, -1, 13, 14, 15, 16, 17};
  std::vector<Tag211> out;
  for (Tag214 t : tags) {
    int i = static_cast<int>(t);
    if (i >= 0 && i < 20 && map[i] >= 0) out.push_back(static_cast<Tag211>(map[i]));
  }
  return out;
}

// torch 2.11's exports
void check211(int err, const char* file, const char* func, uint32_t line, bool assertions)
    asm("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb");
void error_ctor211(void* self, SourceLocation loc, std::string msg)
    asm("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
extern void* not_implemented_vtable211[] asm("_ZTVN3c1019NotImplementedErrorE");
Opaque* def_schema211(Opaque* self, Opaque* schema, Opaque* out_name, const std::vector<Tag211>& tags, int rv)
    asm("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorIN2at3TagESaIS8_EENS_17_RegisterOrVerifyE");
Opaque* def_fn211(Opaque* self, Opaque* name_or_schema, Opaque* fn, const std::vector<Tag211>& tags)
    asm("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorIN2at3TagESaISB_EE");
void library_ctor211(Opaque* self, int kind, std::string ns, struct OptionalKey key, const char* file, uint32_t line)
    asm("_ZN5torch7LibraryC1ENS0_4KindENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt8optionalIN3c1011DispatchKeyEEPKcj");
Opaque* impl211(Opaque* self, const char* name, Opaque* fn, int register_or_verify)
    asm("_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE");

// std::optional<c10::DispatchKey> (uint16_t enum): trivially copyable, 4 bytes, passed in a register like this.
struct OptionalKey {
  uint16_t key;
  bool engaged;
};

// c10::DispatchKey, torch 2.14.1's value to torch 2.11.0's, name by name (both wheels' toString, 156 keys).
uint16_t key211(uint16_t k214) {
  if (k214 == 12) return 13;  // Fake
  if (k214 == 13) return 12;  // Python
  return k214 < 16 ? k214 : k214 + 1;  // 2.11 has Named at 16
}
OptionalKey key211(OptionalKey k) {
  if (k.engaged) k.key = key211(k.key);
  return k;
}
// torch::CppFunction starts with its std::optional<c10::DispatchKey> dispatch_key_ (library.h, both versions).
void renumber_cpp_function(Opaque* fn) {
  auto* key = reinterpret_cast<OptionalKey*>(fn);
  *key = key211(*key);
}
}  // namespace shim

extern "C++" {
void capture_ctor214(void* self) asm("_ZN3c104cuda19CUDAErrorLogCaptureC1Ev");
void capture_ctor214(void*) {}

void check214(int err, const char* file, const char* func, uint32_t line, bool assertions, void* capture)
    asm("_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE");
void check214(int err, const char* file, const char* func, uint32_t line, bool assertions, void*) {
  shim::check211(err, file, func, line, assertions);
}

void not_implemented_ctor214(void* self, shim::SourceLocation loc, std::string msg)
    asm("_ZN3c1019NotImplementedErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void not_implemented_ctor214(void* self, shim::SourceLocation loc, std::string msg) {
  shim::error_ctor211(self, loc, std::move(msg));
  *static_cast<void**>(self) = &shim::not_implemented_vtable211[2];  // past offset-to-top and typeinfo
}

shim::Opaque* def_schema214(shim::Opaque* self, shim::Opaque* schema, shim::Opaque* out_name,
                            const std::vector<shim::Tag214>& tags, int rv)
    asm("_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3TagESaIS8_EENS_17_RegisterOrVerifyE");
shim::Opaque* def_schema214(shim::Opaque* self, shim::Opaque* schema, shim::Opaque* out_name,
                            const std::vector<shim::Tag214>& tags, int rv) {
  return shim::def_schema211(self, schema, out_name, shim::to211(tags), rv);
}

shim::Opaque* def_fn214(shim::Opaque* self, shim::Opaque* name_or_schema, shim::Opaque* fn,
                        const std::vector<shim::Tag214>& tags)
    asm("_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorINS_10headeronly3TagESaISB_EE");
shim::Opaque* def_fn214(shim::Opaque* self, shim::Opaque* name_or_schema, shim::Opaque* fn,
                        const std::vector<shim::Tag214>& tags) {
  shim::renumber_cpp_function(fn);
  return shim::def_fn211(self, name_or_schema, fn, shim::to211(tags));
}
}

// What build_site.sh renames sgl_kernel's imports of torch::Library::Library(Kind, std::string,
// std::optional<DispatchKey>, const char*, uint32_t) and torch::Library::_impl(const char*, CppFunction&&,
// _RegisterOrVerify) & to.
extern "C" void astra_shim_torch_library_ctor(shim::Opaque* self, int kind, std::string ns, shim::OptionalKey key,
                                              const char* file, uint32_t line) {
  shim::library_ctor211(self, kind, std::move(ns), shim::key211(key), file, line);
}
extern "C" shim::Opaque* astra_shim_torch_library_impl(shim::Opaque* self, const char* name, shim::Opaque* fn,
                                                       int register_or_verify) {
  shim::renumber_cpp_function(fn);
  return shim::impl211(self, name, fn, register_or_verify);
}
