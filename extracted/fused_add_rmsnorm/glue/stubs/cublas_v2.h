// astra-sglang stand-in (ours): FlashInfer 0.7.2 headers include cublas_v2.h without using it; empty on purpose.
#pragma once
