//! \file
//! The demo's prompts (Python source in the models' domain; none is in the
//! training corpus), and the earlier request its warm planners serve first:
//! shared by model_demo and planner_ab, so that their rows decode the same text.
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

//! The untimed request a warm planner decodes before the timed ones.
inline constexpr std::string_view warm_prompt_text =
    "class Config:\n    def __init__(self, path):\n        self.path = path\n";

}  // namespace models
