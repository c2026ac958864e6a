//! \file
//! The demo's prompts (Python source in the models' domain; none is in the
//! training corpus), and the earlier request its warm planners serve first:
//! shared by model_demo, planner_ab and planner_trace, so that their rows decode the same text.
#pragma once

#include <array>
#include <string_view>

namespace models {

//! The four prompts every demo row decodes.
inline constexpr std::array<std::string_view, 4> demo_prompts = {
    "def read_config(path):\n    \"\"\"Read the configuration file at path.\"\"\"\n    with open(",
    "import os\nimport sys\n\n\ndef main(argv=None):\n    if argv is None:\n        argv = sys.argv[1:]\n",
    "class Stack:\n    \"\"\"A last-in, first-out container.\"\"\"\n\n    def __init__(self):\n        self.",
    "    def __repr__(self):\n        return '%s(%r)' % (self.__class__.__name__, ",
};

//! Two more prompts the demo does not decode: planner_ab and planner_trace
//! also run them, so that no option is tuned to the demo's four alone.
inline constexpr std::array<std::string_view, 2> extra_prompts = {
    "def parse_args():\n    parser = argparse.ArgumentParser(description=",
    "for i in range(len(items)):\n    if items[i] is None:\n        ",
};

//! The untimed request a warm planner decodes before the timed ones.
inline constexpr std::string_view warm_prompt_text =
    "class Config:\n    def __init__(self, path):\n        self.path = path\n";

}  // namespace models
