from django.apps import AppConfig


class RecipesConfig(AppConfig):
    name = "webapp.recipes"
    label = "recipes"
    verbose_name = "Recipes' own state (experience library)"
