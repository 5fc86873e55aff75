// The device mesh; see device_mesh.h.
#include "comm/device_mesh.h"

#include "comm/dry_run_communicator.h"
#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

MeshCoordinates mesh_coordinates(const MeshShape& s, int rank) {
  return {(rank / s.tensor) % s.data, rank % s.tensor, rank / (s.tensor * s.data)};
}

namespace {

// World rank `rank`'s place in its dense data group (device_mesh.h): ep
// fastest, whatever order the layout gives the ep and dp axes.
int dense_data_rank(const MeshLayout& layout, int rank) {
  return layout.coordinate(rank, "dp") * layout.size("ep") + layout.coordinate(rank, "ep");
}

size_t axis_index(std::string_view axis) {
  for (size_t i = 0; i < std::size(kMeshAxisNames); ++i) {
    if (kMeshAxisNames[i] == axis) return i;
  }
  ZE_CHECK(false) << "no mesh axis " << axis;
  return 0;
}

}  // namespace

DeviceMesh::DeviceMesh(Communicator& world, MeshLayout layout, int rank)
    : world_(world),
      layout_(std::move(layout)),
      shape_{layout_.size("dp") * layout_.size("ep"), layout_.size("tp"), layout_.size("pp"), layout_.size("ep")},
      coords_{dense_data_rank(layout_, rank), layout_.coordinate(rank, "tp"), layout_.coordinate(rank, "pp"),
              layout_.coordinate(rank, "ep")} {}

Communicator& DeviceMesh::group(std::string_view axis) const { return *groups_[axis_index(axis)]; }

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::create(Communicator& world, int tensor, int pipeline) {
  const int w = world.world_size();
  if (tensor < 1 || pipeline < 1 || w % (tensor * pipeline) != 0) {
    return absl::InvalidArgumentError(cat("a mesh of tensor ", tensor, " x pipeline ", pipeline,
                                          " does not divide the world of ", w, " ranks"));
  }
  ZE_ASSIGN_OR_RETURN(MeshLayout layout, MeshLayout::create(kDefaultMeshOrder, {{"tp", tensor}, {"pp", pipeline}}, w));
  return create(world, layout);
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::create(Communicator& world, const MeshLayout& layout) {
  const int w = world.world_size(), r = world.rank();
  if (layout.world() != w) {
    return absl::InvalidArgumentError(cat("a mesh of ", layout.describe(), " (", layout.world(),
                                          " ranks) for a world of ", w, " ranks"));
  }
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(world, layout, r));
  // A group the size of the world is the world; a group of one rank needs
  // no peer (a single-process communicator: every collective the identity);
  // the others are splits. Every rank takes the same branches in the same
  // order, as a split is collective.
  for (size_t i = 0; i < std::size(kMeshAxisNames); ++i) {
    const std::string_view axis = kMeshAxisNames[i];
    const int size = layout.size(axis);
    if (size == w) {
      mesh->groups_[i] = &world;
      continue;
    }
    std::unique_ptr<Communicator> g;
    if (size == 1) {
      g = make_local_communicator();
    } else {
      ZE_ASSIGN_OR_RETURN(g, world.split(layout.group_color(r, axis), layout.coordinate(r, axis)));
    }
    mesh->groups_[i] = g.get();
    mesh->owned_.push_back(std::move(g));
  }
  mesh->data_ = &mesh->group("dp");
  if (layout.size("ep") > 1) {
    // The dense data group: the ranks equal on every axis but ep and dp.
    // The world itself when it is that group in the same rank order.
    bool world_order = mesh->shape_.data == w;
    for (int q = 0; q < w && world_order; ++q) {
      world_order = dense_data_rank(layout, q) == q;
    }
    if (world_order) {
      mesh->data_ = &world;
    } else {
      ZE_ASSIGN_OR_RETURN(mesh->owned_data_,
                          world.split(layout.group_color(layout.group_color(r, "ep"), "dp"), mesh->coords_.data));
      mesh->data_ = mesh->owned_data_.get();
    }
  }
  const int pipeline = layout.size("pp");
  if (pipeline > 1) {
    // The first and last stages' ranks that are equal on every axis but pp,
    // dp and ep; every rank splits, a middle stage's rank alone in a color of
    // its own.
    const MeshCoordinates c = mesh->coords_;
    const bool end_stage = c.pipeline == 0 || c.pipeline == pipeline - 1;
    const int base = layout.group_color(layout.group_color(layout.group_color(r, "pp"), "dp"), "ep");
    const int color = end_stage ? base : w + r;
    const int key = (c.pipeline == 0 ? 0 : mesh->shape_.data) + c.data;
    ZE_ASSIGN_OR_RETURN(mesh->owned_embedding_, world.split(color, key));
    if (end_stage) mesh->embedding_ = mesh->owned_embedding_.get();
  }
  return mesh;
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::dry_run(const MeshShape& shape, int rank) {
  if (shape.data < 1 || shape.tensor < 1 || shape.pipeline < 1 || shape.expert < 1 || shape.data % shape.expert != 0 ||
      rank < 0 || rank >= shape.world()) {
    return absl::InvalidArgumentError(cat("rank ", rank, " of a mesh of data ", shape.data, " (expert ", shape.expert,
                                          ") x tensor ", shape.tensor, " x pipeline ", shape.pipeline));
  }
  // Expert parallelism: the ep axis inside dp (DeepSpeed's layout, the config's default).
  ZE_ASSIGN_OR_RETURN(MeshLayout layout,
                      shape.expert > 1
                          ? MeshLayout::create("tp-ep-dp-pp",
                                               {{"tp", shape.tensor}, {"ep", shape.expert},
                                                {"dp", shape.data / shape.expert}, {"pp", shape.pipeline}},
                                               shape.world())
                          : MeshLayout::create(kDefaultMeshOrder,
                                               {{"tp", shape.tensor}, {"dp", shape.data}, {"pp", shape.pipeline}},
                                               shape.world()));
  return dry_run(layout, rank);
}

absl::StatusOr<std::unique_ptr<DeviceMesh>> DeviceMesh::dry_run(const MeshLayout& layout, int rank) {
  if (rank < 0 || rank >= layout.world()) {
    return absl::InvalidArgumentError(cat("rank ", rank, " of a mesh of ", layout.describe()));
  }
  std::unique_ptr<Communicator> world = make_dry_run_communicator(rank, layout.world());
  std::unique_ptr<DeviceMesh> mesh(new DeviceMesh(*world, layout, rank));
  mesh->owned_world_ = std::move(world);
  for (size_t i = 0; i < std::size(kMeshAxisNames); ++i) {
    const std::string_view axis = kMeshAxisNames[i];
    mesh->owned_.push_back(make_dry_run_communicator(layout.coordinate(rank, axis), layout.size(axis)));
    mesh->groups_[i] = mesh->owned_.back().get();
  }
  const MeshShape& s = mesh->shape_;
  const MeshCoordinates& c = mesh->coords_;
  mesh->data_ = &mesh->group("dp");
  if (s.expert > 1) {
    mesh->owned_data_ = make_dry_run_communicator(c.data, s.data);
    mesh->data_ = mesh->owned_data_.get();
  }
  if (s.pipeline > 1 && (c.pipeline == 0 || c.pipeline == s.pipeline - 1)) {
    mesh->owned_embedding_ = make_dry_run_communicator((c.pipeline == 0 ? 0 : s.data) + c.data, 2 * s.data);
    mesh->embedding_ = mesh->owned_embedding_.get();
  }
  return mesh;
}

}  // namespace zero
