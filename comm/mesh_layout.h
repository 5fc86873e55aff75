// A device mesh's named axes, in Megatron-core's order string: "tp-cp-ep-dp-pp"
// lists the axes from the fastest-varying over world ranks to the slowest,
// so with that order the ranks of a tensor group are adjacent and pipeline
// stages are outermost. Any subset of the five axes, in any order, is a
// layout; an axis the order leaves out has size 1. For axes a_0 .. a_k-1 of
// sizes n_0 .. n_k-1 (a_0 first in the string), world rank r has
//
//   coordinate along a_i = (r / (n_0 n_1 ... n_i-1)) % n_i
//
// and the group of axis a holds the ranks equal to r on every other axis,
// ranked by their coordinate along a. The axes:
//   tp  tensor parallelism (Megatron's split of a layer)
//   cp  context parallelism (the sequence split across ranks)
//   ep  expert parallelism (mixture-of-experts experts across ranks)
//   dp  data parallelism (ZeRO shards over it)
//   pp  pipeline stages
// The default "tp-dp-pp" is the data x tensor x pipeline mesh every run had
// before the order could be chosen; "tp-cp-ep-dp-pp" is Megatron's.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

inline constexpr std::string_view kMeshAxisNames[] = {"tp", "cp", "ep", "dp", "pp"};
inline constexpr std::string_view kDefaultMeshOrder = "tp-dp-pp";

struct MeshAxis {
  std::string name;
  int size = 1;
};

class MeshLayout {
 public:
  // The layout of `order` over `world` ranks with the axes' `sizes` (by
  // name). dp, when in the order and not given, takes the ranks the others
  // leave (world / their product); any other axis not given has size 1.
  // INVALID_ARGUMENT naming the axes and the sizes: an axis name not in
  // kMeshAxisNames (with the known ones), an axis twice, a size for an axis
  // the order leaves out, a size < 1, or sizes whose product is not the
  // world size.
  static absl::StatusOr<MeshLayout> create(std::string_view order, const std::map<std::string, int>& sizes,
                                           int world);
  // Checks `order` alone (its names, each once): what a config reader asks
  // before it knows the sizes.
  static absl::Status check_order(std::string_view order);

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int world() const { return world_; }
  // The axis's size: 1 for an axis the layout leaves out.
  int size(std::string_view axis) const;
  // World rank `rank`'s coordinate along `axis` (0 for an axis left out).
  int coordinate(int rank, std::string_view axis) const;
  // The world rank at `coordinates` (by axis name; axes not given: 0).
  int rank_at(const std::map<std::string, int>& coordinates) const;
  // How rank `rank` splits the world into the group of `axis` (the ranks
  // equal to it on every other axis): a color shared by exactly those ranks,
  // and its key, the coordinate along `axis` (MPI_Comm_split's arguments).
  int group_color(int rank, std::string_view axis) const;
  // "tp 2 x dp 2 x pp 1" in the order's sequence.
  std::string describe() const;

 private:
  std::vector<MeshAxis> axes_;
  int world_ = 1;
  int index(std::string_view axis) const;  // -1 when left out
  int stride(int index) const;             // ranks between neighbours along axes_[index]
};

}  // namespace zero
