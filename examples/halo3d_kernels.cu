/*
 * halo3d_kernels.cu - kernels of examples/halo3d (see halo3d_kernels.h).
 * Plain global-memory kernels: the demo is about the exchange, and the same
 * code computes the distributed run and the one-block reference, which is
 * what makes their results bitwise identical.
 */
#include <stdint.h>

#include "halo3d_kernels.h"

namespace {

const int face_threads = 256;
const int face_max_blocks = 1024;

/* Face planes move by value: the launch sees all six offsets at once. */
struct face_layout {
  size_t off[HALO_FACES + 1];
};

face_layout layout_of(halo_box_t box) {
  face_layout l;
  for (int f = 0; f <= HALO_FACES; f++) l.off[f] = halo_face_offset(box, f);
  return l;
}

/* splitmix64: a cheap, well-mixed function of the global position, so that
 * a wrongly placed face cannot go unnoticed by the check. */
__device__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void init_kernel(double* u, halo_box_t box, halo_place_t place) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= box.n[0] + 2 || j >= box.n[1] + 2) return;
  for (int k = blockIdx.z; k < box.n[2] + 2; k += gridDim.z) {
    int g[3] = {place.off[0] + i - 1, place.off[1] + j - 1, place.off[2] + k - 1};
    uint64_t key = 0, inside = 1;
    for (int d = 2; d >= 0; d--) {
      key = key * (uint64_t)(place.global[d] + 2) + (uint64_t)(g[d] + 1);
      inside &= g[d] >= 0 && g[d] < place.global[d];
    }
    /* Interior and boundary values from different streams of the hash. */
    uint64_t h = mix(key * 2 + (inside ? 0 : 1));
    u[halo_index(box, i, j, k)] = (double)(h >> 11) * 0x1.0p-53;
  }
}

/* Index of element e of face f's plane: plane 1 or n (the interior faces)
 * when packing, 0 or n + 1 (the ghost planes) when unpacking. */
__device__ size_t face_cell(halo_box_t box, int face, size_t e, bool ghost) {
  int d = face / 2, a = d == 0 ? 1 : 0, b = d == 2 ? 1 : 2;
  int c[3];
  c[a] = 1 + (int)(e % (size_t)box.n[a]);
  c[b] = 1 + (int)(e / (size_t)box.n[a]);
  c[d] = (face & 1) ? box.n[d] + (ghost ? 1 : 0) : (ghost ? 0 : 1);
  return halo_index(box, c[0], c[1], c[2]);
}

/* blockIdx.y is the face: the six faces in one launch. */
__global__ void pack_kernel(const double* __restrict__ u, double* __restrict__ send, halo_box_t box,
                            face_layout l, unsigned faces) {
  int f = blockIdx.y;
  if (!((faces >> f) & 1u)) return;
  size_t count = l.off[f + 1] - l.off[f];
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count;
       e += (size_t)gridDim.x * blockDim.x)
    send[l.off[f] + e] = u[face_cell(box, f, e, false)];
}

__global__ void unpack_kernel(double* __restrict__ u, const double* __restrict__ recv,
                              halo_box_t box, face_layout l, unsigned faces) {
  int f = blockIdx.y;
  if (!((faces >> f) & 1u)) return;
  size_t count = l.off[f + 1] - l.off[f];
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count;
       e += (size_t)gridDim.x * blockDim.x)
    u[face_cell(box, f, e, true)] = recv[l.off[f] + e];
}

/* Face f of from into face f of to, faces in the same layout. */
__global__ void copy_faces_kernel(double* __restrict__ to, const double* __restrict__ from, face_layout l,
                                  unsigned faces) {
  int f = blockIdx.y;
  if (!((faces >> f) & 1u)) return;
  size_t count = l.off[f + 1] - l.off[f];
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < count; e += (size_t)gridDim.x * blockDim.x)
    to[l.off[f] + e] = from[l.off[f] + e];
}

/* The sum is written out in one fixed order: the reference must round
 * exactly as the distributed run does. */
__global__ void jacobi_kernel(const double* __restrict__ u, double* __restrict__ unew,
                              halo_box_t box) {
  int i = 1 + blockIdx.x * blockDim.x + threadIdx.x;
  int j = 1 + blockIdx.y * blockDim.y + threadIdx.y;
  if (i > box.n[0] || j > box.n[1]) return;
  size_t sx = 1, sy = (size_t)(box.n[0] + 2), sz = sy * (size_t)(box.n[1] + 2);
  for (int k = 1 + blockIdx.z; k <= box.n[2]; k += gridDim.z) {
    size_t c = halo_index(box, i, j, k);
    double sum = u[c] + u[c - sx] + u[c + sx] + u[c - sy] + u[c + sy] + u[c - sz] + u[c + sz];
    unew[c] = sum * (1.0 / 7.0);
  }
}

/* Blocks for n face elements: enough to fill the GPU, each thread then
 * strides over the rest. */
unsigned face_blocks(size_t n) {
  size_t blocks = (n + face_threads - 1) / face_threads;
  if (blocks == 0) blocks = 1;
  return (unsigned)(blocks < face_max_blocks ? blocks : face_max_blocks);
}

size_t largest_face(halo_box_t box) {
  size_t most = 0;
  for (int f = 0; f < HALO_FACES; f++)
    if (halo_face_count(box, f) > most) most = halo_face_count(box, f);
  return most;
}

unsigned grid_z(int n) { return (unsigned)(n < 65535 ? n : 65535); }

}  // namespace

extern "C" cudaError_t halo_init(double* u, halo_box_t box, halo_place_t place,
                                 cudaStream_t stream) {
  dim3 threads(64, 4, 1);
  dim3 blocks((box.n[0] + 2 + 63) / 64, (box.n[1] + 2 + 3) / 4, grid_z(box.n[2] + 2));
  init_kernel<<<blocks, threads, 0, stream>>>(u, box, place);
  return cudaGetLastError();
}

extern "C" cudaError_t halo_pack(const double* u, double* send, halo_box_t box, unsigned faces,
                                 cudaStream_t stream) {
  if (faces == 0) return cudaSuccess;
  dim3 blocks(face_blocks(largest_face(box)), HALO_FACES);
  pack_kernel<<<blocks, face_threads, 0, stream>>>(u, send, box, layout_of(box), faces);
  return cudaGetLastError();
}

extern "C" cudaError_t halo_unpack(double* u, const double* recv, halo_box_t box, unsigned faces,
                                   cudaStream_t stream) {
  if (faces == 0) return cudaSuccess;
  dim3 blocks(face_blocks(largest_face(box)), HALO_FACES);
  unpack_kernel<<<blocks, face_threads, 0, stream>>>(u, recv, box, layout_of(box), faces);
  return cudaGetLastError();
}

extern "C" cudaError_t halo_copy_faces(double* to, const double* from, halo_box_t box, unsigned faces,
                                       cudaStream_t stream) {
  if (faces == 0) return cudaSuccess;
  dim3 blocks(face_blocks(largest_face(box)), HALO_FACES);
  copy_faces_kernel<<<blocks, face_threads, 0, stream>>>(to, from, layout_of(box), faces);
  return cudaGetLastError();
}

extern "C" cudaError_t halo_jacobi(const double* u, double* unew, halo_box_t box,
                                   cudaStream_t stream) {
  dim3 threads(64, 4, 1);
  dim3 blocks((box.n[0] + 63) / 64, (box.n[1] + 3) / 4, grid_z(box.n[2]));
  jacobi_kernel<<<blocks, threads, 0, stream>>>(u, unew, box);
  return cudaGetLastError();
}
