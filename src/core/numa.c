/*
 * numa.c - the NUMA node nearest a GPU, and binding a thread to the CPUs
 * there, from hwloc.  The topology is loaded once per process (with PCI
 * devices), since loading it costs milliseconds.
 */
#include <pthread.h>

#include "core/debug.h"
#include "core/topo.h"

#ifdef HAVE_HWLOC
#include <hwloc.h>

static hwloc_topology_t topology;
static int topology_ok;
static pthread_once_t topology_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t topology_lock = PTHREAD_MUTEX_INITIALIZER;

static void topology_load(void) {
  if (hwloc_topology_init(&topology) != 0) return;
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topology) != 0) {
    hwloc_topology_destroy(topology);
    return;
  }
  topology_ok = 1;
}

/* The CPU-side object nearest a PCI device, with the topology lock held on
 * success (the caller unlocks); NULL when hwloc cannot place the device. */
static hwloc_obj_t locked_ancestor_of_pci(const char* bus_id) {
  pthread_once(&topology_once, topology_load);
  if (!topology_ok) return NULL;
  pthread_mutex_lock(&topology_lock);
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topology, bus_id);
  hwloc_obj_t anc = dev ? hwloc_get_non_io_ancestor_obj(topology, dev) : NULL;
  if (anc == NULL) {
    pthread_mutex_unlock(&topology_lock);
    MPN_INFO(MPN_SUBSYS_INIT, "hwloc does not place PCI device %s", bus_id);
  }
  return anc;
}

void mpn_numa_preload(void) { pthread_once(&topology_once, topology_load); }

int mpn_numa_node_of_pci(const char* bus_id) {
  hwloc_obj_t anc = locked_ancestor_of_pci(bus_id);
  if (anc == NULL) return -1;
  int node = -1;
  if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) node = hwloc_bitmap_first(anc->nodeset);
  pthread_mutex_unlock(&topology_lock);
  return node;
}

int mpn_bind_thread_near_pci(const char* bus_id) {
  hwloc_obj_t anc = locked_ancestor_of_pci(bus_id);
  if (anc == NULL) return -1;
  int res = -1;
  if (anc->cpuset && !hwloc_bitmap_iszero(anc->cpuset))
    res = hwloc_set_cpubind(topology, anc->cpuset, HWLOC_CPUBIND_THREAD);
  pthread_mutex_unlock(&topology_lock);
  return res == 0 ? 0 : -1;
}

#else

void mpn_numa_preload(void) {}

int mpn_numa_node_of_pci(const char* bus_id) {
  (void)bus_id;
  return -1;
}

int mpn_bind_thread_near_pci(const char* bus_id) {
  (void)bus_id;
  return -1;
}

#endif
