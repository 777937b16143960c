
# Backend submodules, present per build (tools/gen_stubs.sh): metal_emu (POSIX), metal (Apple),
# cuda (LMTAIL_CUDA=ON). Reach them through lmtail._backend, which checks they exist.
import types as _types

metal_emu: _types.ModuleType
metal: _types.ModuleType
cuda: _types.ModuleType
