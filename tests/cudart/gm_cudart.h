/* gm_cudart.h -- the controls of the CUDA runtime stand-in (tests/cudart),
   for tests that link it. */
#ifndef GM_CUDART_H
#define GM_CUDART_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
int gmcudart_violations(void);              /* violations of CUDA's rules counted so far */
const char* gmcudart_last_violation(void);  /* the last one's text ("" if none) */
void gmcudart_reset_violations(void);
int gmcudart_contexts(int device);          /* primary contexts created on the device (0 or 1) */
void gmcudart_set_cma(int on);              /* concurrentManagedAccess */
void gmcudart_set_driver_version(int version); /* below the runtime's: cudaErrorInsufficientDriver */
void gmcudart_inject_sticky(int error);     /* a cudaError_t that every later call returns */
void gmcudart_reset(void);                  /* clears sticky and last errors (tests only) */
size_t gmcudart_set_capacity(int device, size_t bytes); /* the old one; only while nothing is allocated */
int gmcudart_in_host_func(void);            /* 1 on a worker running a host function */
#ifdef __cplusplus
}
#endif
#endif
