// The device mesh; see device_mesh.h.
#include "comm/device_mesh.h"

#include "comm/dry_run_communicator.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

MeshCoordinates mesh_coordinates(const MeshShape& s, int rank) {
  return {(rank / s.tensor) % s.data, rank % s.tensor, rank / (s.tensor * s.data)};
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::create(Communicator& world, int tensor, int pipeline) {
  const int w = world.world_size();
  if (tensor < 1 || pipeline < 1 || w % (tensor * pipeline) != 0) {
    return absl::InvalidArgumentError(cat("a mesh of tensor ", tensor, " x pipeline ", pipeline,
                                          " does not divide the world of ", w, " ranks"));
  }
  const MeshShape shape{w / (tensor * pipeline), tensor, pipeline};
  const MeshCoordinates c = mesh_coordinates(shape, world.rank());
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(world, shape, c));
  // A group the size of the world is the world; a group of one rank needs
  // no peer (a single-process communicator: every collective the identity);
  // the others are splits. Every rank takes the same branches in the same
  // order, as a split is collective.
  auto group = [&](int size, int color, int key, std::unique_ptr<Communicator>& owned) -> absl::StatusOr<Communicator*> {
    if (size == w) return &world;
    if (size == 1) {
      owned = make_local_communicator();
    } else {
      ZE_ASSIGN_OR_RETURN(owned, world.split(color, key));
    }
    return owned.get();
  };
  ZE_ASSIGN_OR_RETURN(mesh->data_, group(shape.data, c.pipeline * tensor + c.tensor, c.data, mesh->owned_data_));
  ZE_ASSIGN_OR_RETURN(mesh->tensor_,
                      group(shape.tensor, c.pipeline * shape.data + c.data, c.tensor, mesh->owned_tensor_));
  ZE_ASSIGN_OR_RETURN(mesh->pipeline_,
                      group(shape.pipeline, c.data * tensor + c.tensor, c.pipeline, mesh->owned_pipeline_));
  if (pipeline > 1) {
    // Every rank splits; a middle stage's rank alone in a color of its own.
    const bool end_stage = c.pipeline == 0 || c.pipeline == pipeline - 1;
    const int color = end_stage ? c.tensor : tensor + world.rank();
    const int key = (c.pipeline == 0 ? 0 : shape.data) + c.data;
    ZE_ASSIGN_OR_RETURN(mesh->owned_embedding_, world.split(color, key));
    if (end_stage) mesh->embedding_ = mesh->owned_embedding_.get();
  }
  return mesh;
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::dry_run(const MeshShape& shape, int rank) {
  if (shape.data < 1 || shape.tensor < 1 || shape.pipeline < 1 || rank < 0 || rank >= shape.world()) {
    return absl::InvalidArgumentError(cat("rank ", rank, " of a mesh of data ", shape.data, " x tensor ", shape.tensor,
                                          " x pipeline ", shape.pipeline));
  }
  std::unique_ptr<Communicator> world = make_dry_run_communicator(rank, shape.world());
  const MeshCoordinates c = mesh_coordinates(shape, rank);
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(*world, shape, c));
  mesh->owned_world_ = std::move(world);
  mesh->owned_data_ = make_dry_run_communicator(c.data, shape.data);
  mesh->owned_tensor_ = make_dry_run_communicator(c.tensor, shape.tensor);
  mesh->owned_pipeline_ = make_dry_run_communicator(c.pipeline, shape.pipeline);
  mesh->data_ = mesh->owned_data_.get();
  mesh->tensor_ = mesh->owned_tensor_.get();
  mesh->pipeline_ = mesh->owned_pipeline_.get();
  if (shape.pipeline > 1 && (c.pipeline == 0 || c.pipeline == shape.pipeline - 1)) {
    mesh->owned_embedding_ =
        make_dry_run_communicator((c.pipeline == 0 ? 0 : shape.data) + c.data, 2 * shape.data);
    mesh->embedding_ = mesh->owned_embedding_.get();
  }
  return mesh;
}

}  // namespace zero
