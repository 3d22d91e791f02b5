#pragma once
// The umbrella header: #include <strata/strata.h> brings in the whole public API.

#include "strata/autograd/engine.h"
#include "strata/autograd/function.h"
#include "strata/autograd/grad_mode.h"
#include "strata/autograd/gradcheck.h"
#include "strata/autograd/ops.h"
#include "strata/distributed/collectives.h"
#include "strata/distributed/comm_logger.h"
#include "strata/distributed/functional.h"
#include "strata/distributed/gradcheck.h"
#include "strata/tensor/creation.h"
#include "strata/tensor/tensor.h"
