// astra-sglang stand-in (ours): FlashInfer 0.7.2 headers include cublasLt.h without using it; empty on purpose.
#pragma once
