// The device mesh: the world's ranks as data x tensor x pipeline groups, the
// way Megatron-LM orders them: ranks of one tensor group adjacent, then data
// parallelism, then pipeline stages outermost. For world rank r with
// tensor size T and data size D:
//
//   tensor rank   t = r % T
//   data rank     d = (r / T) % D
//   pipeline rank p = r / (T D)
//
// The data group is the ranks with the same (t, p) (ZeRO shards over it and
// samples are drawn by d); the tensor group those with the same (d, p); the
// pipeline group those with the same (t, d), ordered by stage. With T = P = 1
// the data group is the world communicator itself (no split), which is every
// run today.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace zero {

struct MeshShape {
  int data = 1, tensor = 1, pipeline = 1;
  int world() const { return data * tensor * pipeline; }
};

struct MeshCoordinates {
  int data = 0, tensor = 0, pipeline = 0;
};

// The coordinates of world rank `rank` in `shape` (the formulas above).
MeshCoordinates mesh_coordinates(const MeshShape& shape, int rank);

class DeviceMesh {
 public:
  // Splits `world` (kept by reference: it must outlive the mesh) into the
  // groups of a mesh of tensor x pipeline, the data size being what is left.
  // Every rank calls it. INVALID_ARGUMENT when tensor x pipeline does not
  // divide the world size.
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> create(Communicator& world, int tensor = 1, int pipeline = 1);
  // The mesh of a dry run (comm/dry_run_communicator.h) playing world rank
  // `rank` of `shape`: every group a dry-run communicator of its size and
  // this rank's place in it (a dry run knows no other rank, so it cannot
  // split; it builds the groups the split would give). INVALID_ARGUMENT for
  // a rank outside the shape.
  static absl::StatusOr<std::unique_ptr<DeviceMesh>> dry_run(const MeshShape& shape, int rank);

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coords_; }
  Communicator& world() const { return world_; }
  Communicator& data() const { return *data_; }
  Communicator& tensor() const { return *tensor_; }
  Communicator& pipeline() const { return *pipeline_; }
  // The embedding group (above); nullptr on a middle stage or when P = 1.
  Communicator* embedding() const { return embedding_; }

 private:
  DeviceMesh(Communicator& world, MeshShape shape, MeshCoordinates coords)
      : world_(world), shape_(shape), coords_(coords) {}

  std::unique_ptr<Communicator> owned_world_;  // a dry run's
  Communicator& world_;
  MeshShape shape_;
  MeshCoordinates coords_;
  std::unique_ptr<Communicator> owned_data_, owned_tensor_, owned_pipeline_, owned_embedding_;
  Communicator* embedding_ = nullptr;
  Communicator* data_ = nullptr;
  Communicator* tensor_ = nullptr;
  Communicator* pipeline_ = nullptr;
};

}  // namespace zero
