// The 4D process grid of DESIGN.md section 1: P = Gd * Gz * Gy * Gx ranks of a
// base communicator (any backend's), X varying fastest:
//   x = r % Gx,  y = (r / Gx) % Gy,  z = (r / (Gx Gy)) % Gz,  d = r / (Gx Gy Gz)
// with one communicator per axis (the ranks that differ only in that
// coordinate), split once at construction. Built once in main (or a test) and
// passed down by reference; nothing global.
#pragma once

#include <memory>
#include <string>

#include "dendrite/comm/communicator.h"

namespace dendrite {

struct GridShape {
  int x = 1, y = 1, z = 1, d = 1;
  int size() const { return x * y * z * d; }
  std::string str() const;  // "x=2,y=2,z=1,d=2"
  // Parses "x=2,y=2,z=1,d=2" (axes left out are 1; d may be left out to fill
  // world_size when world_size > 0). Errors name the problem and the fix.
  static GridShape parse(const std::string& text, int world_size = 0);
};

class ProcessGrid {
 public:
  // Splits `base` into the four axes and a duplicate of it ("world"), which
  // share its backend and settings; base stays the caller's and may go first.
  // Collective over base. Throws on every rank when the grid's size differs
  // from the base's or the ranks pass different shapes.
  ProcessGrid(const GridShape& shape, Communicator& base);
  // A grid of one process that needs no MPI (tests of serial code).
  static std::unique_ptr<ProcessGrid> single();
  ~ProcessGrid();

  const GridShape& shape() const { return shape_; }
  int rank() const { return rank_; }  // in the base communicator
  int x() const { return x_; }
  int y() const { return y_; }
  int z() const { return z_; }
  int d() const { return d_; }

  Communicator& X() { return *ax_; }
  Communicator& Y() { return *ay_; }
  Communicator& Z() { return *az_; }
  Communicator& D() { return *ad_; }
  Communicator& world() { return *world_; }
  // Makes now what the axes' device collectives need (Communicator::connect:
  // NCCL's communicators and axis streams), so that no training step makes
  // any; the model calls it when it is built. Collective; a second call does
  // nothing. World carries host data only and is left alone.
  void connect();
  // The watchdog of every axis and the world (see Communicator::set_timeout).
  void set_timeout(double seconds);
  // Zeroes the counters of every axis and the world.
  void reset_stats();

 private:
  ProcessGrid() = default;
  GridShape shape_;
  int rank_ = 0, x_ = 0, y_ = 0, z_ = 0, d_ = 0;
  std::unique_ptr<Communicator> ax_, ay_, az_, ad_, world_;
};

}  // namespace dendrite
