/*
 * halo3d_kernels.h - the CUDA side of examples/halo3d behind a C launch API:
 * field set-up, packing and unpacking of the six faces (one launch each) and
 * the 7-point Jacobi sweep.  Every launch is asynchronous on the given stream.
 */
#ifndef HALO3D_KERNELS_H_
#define HALO3D_KERNELS_H_

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __CUDACC__
#define HALO_HD __host__ __device__
#else
#define HALO_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Faces in the order -x, +x, -y, +y, -z, +z: face f lies across dimension
 * f / 2, on the high side when f is odd; halo_opposite() is the other side. */
enum { HALO_FACES = 6 };

/** A block of n[0] x n[1] x n[2] interior cells inside a one-cell ghost layer. */
typedef struct {
  int n[3];
} halo_box_t;

/** Where a block lies in the global grid: for the initial and boundary values. */
typedef struct {
  int off[3];    /**< global index of the block's first interior cell */
  int global[3]; /**< interior size of the global grid */
} halo_place_t;

static inline HALO_HD int halo_opposite(int face) { return face ^ 1; }

/** Index of cell (i, j, k) of a block; 0 and n+1 are ghost planes, x runs fastest. */
static inline HALO_HD size_t halo_index(halo_box_t b, int i, int j, int k) {
  return (size_t)i + (size_t)(b.n[0] + 2) * ((size_t)j + (size_t)(b.n[1] + 2) * (size_t)k);
}

/** Cells in a block, ghost layer included. */
static inline HALO_HD size_t halo_cells(halo_box_t b) {
  return (size_t)(b.n[0] + 2) * (size_t)(b.n[1] + 2) * (size_t)(b.n[2] + 2);
}

/** Cells in face f: the interior cells of one plane, ghost edges excluded
 * (the 7-point stencil never reads them). */
static inline HALO_HD size_t halo_face_count(halo_box_t b, int face) {
  int d = face / 2;
  return (size_t)b.n[d == 0 ? 1 : 0] * (size_t)b.n[d == 2 ? 1 : 2];
}

/** Offset of face f in a buffer that holds all six faces back to back;
 * face = HALO_FACES gives the buffer's length. */
static inline HALO_HD size_t halo_face_offset(halo_box_t b, int face) {
  size_t off = 0;
  for (int f = 0; f < face; f++) off += halo_face_count(b, f);
  return off;
}

/** Sets every cell of u, ghosts included: interior cells of the global grid
 * to pseudo-random values in [0, 1), cells beyond its edge to the fixed
 * boundary values.  Both depend only on the global position, so any
 * decomposition starts from the same field. */
cudaError_t halo_init(double* u, halo_box_t box, halo_place_t place, cudaStream_t stream);

/** Copies the interior face planes selected by the bits of faces (bit f for
 * face f) into send, each at halo_face_offset(box, f). */
cudaError_t halo_pack(const double* u, double* send, halo_box_t box, unsigned faces,
                      cudaStream_t stream);

/** Copies recv's faces selected by faces into the matching ghost planes:
 * face f of recv (same layout as halo_pack's) into the ghost plane on side f. */
cudaError_t halo_unpack(double* u, const double* recv, halo_box_t box, unsigned faces,
                        cudaStream_t stream);

/** Copies the faces selected by faces from from into to (both in
 * halo_pack's layout), in one launch. */
cudaError_t halo_copy_faces(double* to, const double* from, halo_box_t box, unsigned faces, cudaStream_t stream);

/** One Jacobi sweep: every interior cell of unew becomes the mean of the
 * same cell of u and its six neighbours (ghosts included).  Ghosts of unew
 * are not written. */
cudaError_t halo_jacobi(const double* u, double* unew, halo_box_t box, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* HALO3D_KERNELS_H_ */
