"""The llama.cpp oracle: llama-cpp-python 0.3.36's own libraries, driven through ctypes.

lmtail never loads llama.cpp at run time; only tests and benchmarks import this package.
Everything here skips (pytest.skip) with a visible reason when the oracle is not installed.
"""
