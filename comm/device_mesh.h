// The device mesh: the world's ranks split into one group per named axis
// (comm/mesh_layout.h: tp, cp, ep, dp, pp, in an order string such as
// Megatron's "tp-cp-ep-dp-pp"), each group the ranks equal on every other
// axis. The default order "tp-dp-pp" is the way Megatron-LM orders data x
// tensor x pipeline: ranks of one tensor group adjacent, then data
// parallelism, then pipeline stages outermost. For world rank r with tensor
// size T and data size D there:
//
//   tensor rank   t = r % T
//   data rank     d = (r / T) % D
//   pipeline rank p = r / (T D)
//
// The data group is the ranks with the same (t, p) (ZeRO shards over it and
// samples are drawn by d); the tensor group those with the same (d, p); the
// pipeline group those with the same (t, d), ordered by stage. With T = P = 1
// the data group is the world communicator itself (no split). An axis the
// layout leaves out (or of size 1) has a one-rank group, so code may always
// ask for group("ep") or group("cp").
#pragma once

#include <iterator>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/mesh_layout.h"

namespace zero {

// data: the data-parallel ranks of one model copy's dense parameters (the
// ep axis's included); expert: the ep axis alone (it divides data).
struct MeshShape {
  int data = 1, tensor = 1, pipeline = 1;
  int expert = 1;
  int world() const { return data * tensor * pipeline; }
};

struct MeshCoordinates {
  int data = 0, tensor = 0, pipeline = 0;
  int expert = 0;
};

// The coordinates of world rank `rank` in `shape` (the formulas above: the
// default order).
MeshCoordinates mesh_coordinates(const MeshShape& shape, int rank);

class DeviceMesh {
 public:
  // Splits `world` (kept by reference: it must outlive the mesh) into the
  // groups of a mesh of tensor x pipeline, the data size being what is left.
  // Every rank calls it. INVALID_ARGUMENT when tensor x pipeline does not
  // divide the world size.
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> create(Communicator& world, int tensor = 1, int pipeline = 1);
  // The groups of `layout` (whose world must be world's size).
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> create(Communicator& world, const MeshLayout& layout);
  // The mesh of a dry run (comm/dry_run_communicator.h) playing world rank
  // `rank` of `shape`: every group a dry-run communicator of its size and
  // this rank's place in it (a dry run knows no other rank, so it cannot
  // split; it builds the groups the split would give). INVALID_ARGUMENT for
  // a rank outside the shape.
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> dry_run(const MeshShape& shape, int rank);
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> dry_run(const MeshLayout& layout, int rank);

  const MeshLayout& layout() const { return layout_; }
  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coords_; }
  Communicator& world() const { return world_; }
  // The group of `axis` (one of kMeshAxisNames; a one-rank group for an axis
  // the layout leaves out).
  Communicator& group(std::string_view axis) const;
  // The dense parameters' data-parallel group (above: the ep and dp axes).
  Communicator& data() const { return *data_; }
  // Expert parallelism's groups (above): the ranks that split the experts,
  // and the ranks that hold the same experts.
  Communicator& expert() const { return group("ep"); }
  Communicator& expert_data() const { return group("dp"); }
  Communicator& tensor() const { return group("tp"); }
  Communicator& pipeline() const { return group("pp"); }
  // The embedding group (above); nullptr on a middle stage or when P = 1.
  Communicator* embedding() const { return embedding_; }

 private:
  DeviceMesh(Communicator& world, MeshLayout layout, int rank);

  std::unique_ptr<Communicator> owned_world_;  // a dry run's
  Communicator& world_;
  MeshLayout layout_;
  MeshShape shape_;
  MeshCoordinates coords_;
  // One per kMeshAxisNames entry, in that order; owned_ holds those that are
  // not the world.
  Communicator* groups_[std::size(kMeshAxisNames)] = {};
  std::vector<std::unique_ptr<Communicator>> owned_;
  Communicator* data_ = nullptr;  // group("dp") unless the ep axis has ranks
  std::unique_ptr<Communicator> owned_data_;
  std::unique_ptr<Communicator> owned_embedding_;
  Communicator* embedding_ = nullptr;
};

}  // namespace zero
