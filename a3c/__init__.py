"""A3C (Mnih et al. 2016) on Gymnasium environments, built on the ``hogwild`` engine."""
