#pragma once
// Graph: a network as a directed acyclic graph of named nodes (ResNet's
// residual adds, DenseNet's and Inception's concatenations), of which
// Sequential is the special case of a chain.
//
// Note [graph model]
// A node is a module applied to one input (conv, BN, ReLU, pools, linear,
// flatten, ..., or a whole sub-network), or a function of several inputs
// (add of same-shaped tensors, concat on channels). Its inputs name other
// nodes or "input" (the network's input); one node is the output. A node's
// name is a dotted path ("layer1.0.conv1"): its module's parameters are
// named under it ("layer1.0.conv1.weight"), through container modules made
// for the path's prefixes ("layer1", "layer1.0"), so that the state dict
// reads as torchvision's and PyTorch loads a qat checkpoint by name.
// Nodes may be added in any order; check() (and the first forward) sorts
// them topologically and refuses a cycle, an input that names no node, a
// name given twice or a path that is both a module and a container, naming
// the node. A node's module is looked up by its path at every forward, so a
// rewrite that replaces a child (prepare()) is seen. An error inside a
// node's forward (a convolution given the wrong channels) is reported as
// "graph node '<name>' (<origin>): <the op's error>".
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layers/module.h"

namespace qat {

enum class GraphOp { module, add, concat };

struct GraphNode {
  std::string name;
  GraphOp op = GraphOp::module;
  std::vector<std::string> inputs;  // module: one
  std::string origin;               // where it was defined ("net.yaml, line 12"), or empty
};

class Graph : public Module {
 public:
  // The name the network's input goes by in nodes' inputs.
  static constexpr const char* kInput = "input";

  // A module node: `m` applied to `input`. Returns the node's name.
  std::string add(const std::string& name, ModulePtr m, const std::string& input);
  // A function node: add (two inputs of one shape) or concat (two or more,
  // joined along dim 1). Returns the node's name.
  std::string add_op(const std::string& name, GraphOp op, std::vector<std::string> inputs);
  // An add node's forward in eval mode with no gradient, where set and it
  // returns a defined tensor, instead of the float sum (quant.integer_forward:
  // the integer model's add, Note [integer eval]).
  using AddEval = std::function<Tensor(const Tensor& a, const Tensor& b)>;
  void set_add_eval(const std::string& node, AddEval eval);
  void set_output(const std::string& name);
  // Where node `name` was defined (a model file's line): errors about the
  // node, its shapes at a forward included, then name it.
  void set_origin(const std::string& name, std::string origin);
  const std::string& output() const { return output_; }
  const std::vector<GraphNode>& nodes() const { return nodes_; }

  // Every node's name, each after the nodes it reads (check()'s order).
  std::vector<std::string> order() const;
  // The nodes that read node `name`, in definition order.
  std::vector<std::string> readers(const std::string& name) const;
  // The node named `name`; throws naming it when there is none. (A
  // reference into the node list: insert_after() may move it.)
  const GraphNode& node(const std::string& name) const;
  // A module node's module (null for a function node or an unknown name).
  Module* module(const std::string& name) const;
  ModulePtr shared_module(const std::string& name) const;
  // Rewrites (prepare()): a module node's module replaced; a module node
  // `name` inserted after node `after`, every reader of `after` (and the
  // output, if it was `after`) now reading it. Return the node's name.
  void replace_module(const std::string& name, ModulePtr m);
  // (by value: a name read from nodes() would not outlive the insertion)
  std::string insert_after(std::string after, std::string name, ModulePtr m);

  // The checks of Note [graph model]; throws naming the node.
  void check() const;
  Tensor forward(const Tensor& x) override;
  // Every node's value for input x (none dropped): for comparisons node by node.
  std::map<std::string, Tensor> node_values(const Tensor& x);
  std::string type_name() const override { return "Graph"; }
  std::string describe() const override;

 private:
  // Each node's position in nodes_, by name.
  std::map<std::string, size_t> node_index() const;
  // Nodes in an order where every input comes before its reader (check()'s
  // sort; its refusals); `index` from node_index().
  std::vector<size_t> topological_order(const std::map<std::string, size_t>& index) const;
  // The nodes' values (by node index); each dropped after its last reader unless keep_all.
  std::vector<Tensor> evaluate(const Tensor& x, bool keep_all);
  Module& container_for(const std::string& path);
  Module* module_at(const std::string& path) const;

  std::vector<GraphNode> nodes_;
  std::string output_;
  std::map<std::string, AddEval> add_eval_;
};

// A module with children and no computation of its own: the prefixes of a
// Graph's node paths ("layer1", "layer1.0").
class ModuleContainer : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ModuleContainer"; }
  void add(const std::string& name, ModulePtr m) { register_module(name, std::move(m)); }
};

}  // namespace qat
